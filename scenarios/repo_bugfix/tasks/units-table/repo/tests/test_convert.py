import unittest

from units.convert import convert


class ConvertTest(unittest.TestCase):
    def test_mass(self):
        self.assertEqual(convert(2, "kg", "g"), 2000)

    def test_marathon(self):
        self.assertEqual(convert(42.195, "km", "m"), 42195)

    def test_dimensions(self):
        with self.assertRaises(ValueError):
            convert(1, "kg", "m")
