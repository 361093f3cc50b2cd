"""Calendar helpers for booking nights and days."""
