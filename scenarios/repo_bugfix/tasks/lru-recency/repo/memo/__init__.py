"""Memoization with a bounded least-recently-used cache."""
