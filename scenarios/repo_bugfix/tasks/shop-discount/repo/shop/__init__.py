"""A tiny shop: items, a cart and pricing rules."""
