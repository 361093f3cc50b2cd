"""Small matrices as lists of rows."""
