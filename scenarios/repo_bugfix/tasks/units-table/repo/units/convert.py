from .table import factor


def convert(value: float, src: str, dst: str) -> float:
    """Convert between units of the same dimension, rounded to 6 decimals."""
    dim_a, fa = factor(src)
    dim_b, fb = factor(dst)
    if dim_a != dim_b:
        raise ValueError(f"cannot convert {dim_a} to {dim_b}")
    return round(value * fa / fb, 6)
