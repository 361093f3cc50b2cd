import unittest

from report.summary import best_region, revenue_by_region

DATA = """region,amount
north,120.5
south,80
north,10
"""


class SummaryTest(unittest.TestCase):
    def test_revenue(self):
        self.assertEqual(revenue_by_region(DATA), {"north": 130.5, "south": 80.0})

    def test_best(self):
        self.assertEqual(best_region("region,amount\nwest,5\neast,3\n"), "west")
