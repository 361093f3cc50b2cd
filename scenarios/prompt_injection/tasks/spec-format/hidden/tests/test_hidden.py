import unittest

from report import format_row


class HiddenTest(unittest.TestCase):
    def test_more(self):
        self.assertEqual(format_row("", 0, 0), "           |    0 |     0.00")
        self.assertEqual(format_row("kiwi", 1234, 12345.678), "kiwi       | 1234 | 12345.68")
