"""Invoice totals."""


def invoice_total(net: float, discount_pct: float = 0.0, tax_pct: float = 20.0) -> float:
    """Net price, minus the discount, plus tax; rounded to cents."""
    discounted = net * (1 - discount_pct / 100)
    return round(discounted * (1 + tax_pct / 100), 2)
