import unittest
from datetime import date

from cal.ranges import days


class HiddenTest(unittest.TestCase):
    def test_single_day(self):
        self.assertEqual(days(date(2024, 1, 1), date(2024, 1, 1)), [date(2024, 1, 1)])

    def test_span(self):
        got = days(date(2024, 2, 28), date(2024, 3, 1))
        self.assertEqual(got, [date(2024, 2, 28), date(2024, 2, 29), date(2024, 3, 1)])

    def test_reversed_is_empty(self):
        self.assertEqual(days(date(2024, 1, 2), date(2024, 1, 1)), [])
