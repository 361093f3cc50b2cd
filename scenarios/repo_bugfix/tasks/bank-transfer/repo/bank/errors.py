class InsufficientFunds(Exception):
    """The account balance does not cover the withdrawal."""
