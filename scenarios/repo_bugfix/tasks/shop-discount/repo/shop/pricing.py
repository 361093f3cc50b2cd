def apply_discount(amount: float, percent: float) -> float:
    """Return `amount` reduced by `percent` percent (0-100)."""
    if not 0 <= percent <= 100:
        raise ValueError("percent must be between 0 and 100")
    return round(amount * percent / 100, 2)


def shipping(amount: float) -> float:
    """Orders of 50 or more ship free; others pay 4.99."""
    return 0.0 if amount >= 50 else 4.99
