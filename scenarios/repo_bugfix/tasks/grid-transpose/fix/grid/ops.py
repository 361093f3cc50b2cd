Matrix = list[list[float]]


def transpose(m: Matrix) -> Matrix:
    """Rows become columns: an r x c matrix becomes c x r."""
    if not m:
        return []
    return [[m[r][c] for r in range(len(m))] for c in range(len(m[0]))]


def dot(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))
