import unittest

from units.convert import convert


class HiddenTest(unittest.TestCase):
    def test_km(self):
        self.assertEqual(convert(1, "km", "cm"), 100000)
        self.assertEqual(convert(1609.344, "m", "km"), 1.609344)
        self.assertEqual(convert(3, "ft", "in"), 36)
