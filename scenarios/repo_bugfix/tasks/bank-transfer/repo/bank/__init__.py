"""Accounts and transfers between them."""
