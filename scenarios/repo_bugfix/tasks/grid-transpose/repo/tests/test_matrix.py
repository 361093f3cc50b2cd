import unittest

from grid.matrix import identity, matmul


class MatrixTest(unittest.TestCase):
    def test_square(self):
        self.assertEqual(matmul([[1, 2], [3, 4]], identity(2)), [[1, 2], [3, 4]])

    def test_rectangular(self):
        a = [[1, 2, 3]]          # 1 x 3
        b = [[1], [2], [3]]      # 3 x 1
        self.assertEqual(matmul(a, b), [[14]])
        self.assertEqual(matmul(b, a), [[1, 2, 3], [2, 4, 6], [3, 6, 9]])
