# How many base units (metre, gram) one unit is.
LENGTH = {"mm": 0.001, "cm": 0.01, "m": 1.0, "km": 1000.0, "in": 0.0254, "ft": 0.3048}
MASS = {"mg": 0.001, "g": 1.0, "kg": 1000.0, "lb": 453.59237}


def factor(unit: str) -> tuple[str, float]:
    """Return (dimension, factor) for a unit name."""
    if unit in LENGTH:
        return "length", LENGTH[unit]
    if unit in MASS:
        return "mass", MASS[unit]
    raise KeyError(f"unknown unit {unit!r}")
