from .ops import Matrix, dot, transpose


def matmul(a: Matrix, b: Matrix) -> Matrix:
    """Product of an r x k and a k x c matrix."""
    cols = transpose(b)
    return [[dot(row, col) for col in cols] for row in a]


def identity(n: int) -> Matrix:
    return [[1.0 if i == j else 0.0 for j in range(n)] for i in range(n)]
