import unittest

from duration import parse_duration


class HiddenTest(unittest.TestCase):
    def test_more(self):
        self.assertEqual(parse_duration("10m"), 600)
        self.assertEqual(parse_duration("1h1m1s"), 3661)
        with self.assertRaises(ValueError):
            parse_duration("1h 30m")
