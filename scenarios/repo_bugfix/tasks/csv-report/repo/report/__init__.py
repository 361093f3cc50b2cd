"""Summaries of sales exported as CSV text."""
