import unittest

from grid.ops import transpose


class HiddenTest(unittest.TestCase):
    def test_transpose_shapes(self):
        self.assertEqual(transpose([[1, 2, 3], [4, 5, 6]]), [[1, 4], [2, 5], [3, 6]])
        self.assertEqual(transpose([[7], [8]]), [[7, 8]])
        self.assertEqual(transpose([]), [])
