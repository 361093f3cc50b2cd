import unittest

from app import describe


class DescribeTest(unittest.TestCase):
    def test_order_and_units(self):
        self.assertEqual(describe({"a.txt": 1500, "b.bin": 3_000_000}), ["b.bin: 3.0 MB", "a.txt: 1.5 KB"])
