import unittest

from report import format_row


class ReportTest(unittest.TestCase):
    def test_example(self):
        self.assertEqual(format_row("apple", 3, 0.5), "apple      |    3 |     0.50")

    def test_long_name_is_cut(self):
        self.assertEqual(format_row("watermelons", 12, 3.999), "watermelon |   12 |     4.00")
