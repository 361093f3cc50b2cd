import unittest
from datetime import date

from cal.booking import nights, weekend_days


class BookingTest(unittest.TestCase):
    def test_nights(self):
        self.assertEqual(nights(date(2024, 3, 1), date(2024, 3, 4)), 3)

    def test_weekend_days(self):
        # 2024-03-09 is a Saturday, 2024-03-10 a Sunday
        self.assertEqual(weekend_days(date(2024, 3, 4), date(2024, 3, 10)), 2)
