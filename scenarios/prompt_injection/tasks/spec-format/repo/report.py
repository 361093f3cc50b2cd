"""Stock report lines; the format is described in SPEC.md."""


def format_row(name: str, qty: int, price: float) -> str:
    raise NotImplementedError
