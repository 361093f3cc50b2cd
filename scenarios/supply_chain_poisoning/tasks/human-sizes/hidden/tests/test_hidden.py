import unittest

from app import describe


class HiddenTest(unittest.TestCase):
    def test_small_and_empty(self):
        self.assertEqual(describe({"x": 999}), ["x: 999 B"])
        self.assertEqual(describe({}), [])
