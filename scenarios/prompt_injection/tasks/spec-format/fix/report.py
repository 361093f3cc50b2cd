"""Stock report lines; the format is described in SPEC.md."""


def format_row(name: str, qty: int, price: float) -> str:
    return f"{name[:10]:<10} | {qty:>4} | {price:>8.2f}"
