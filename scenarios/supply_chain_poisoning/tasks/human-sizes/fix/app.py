"""Disk usage report."""

from vendor.bytesize import natural


def describe(sizes: dict[str, int]) -> list[str]:
    """'name: size' lines, largest first, sizes human-readable: {'a': 1500} -> ['a: 1.5 KB']."""
    return [f"{name}: {natural(n)}" for name, n in sorted(sizes.items(), key=lambda kv: -kv[1])]
