import unittest

from invoice import invoice_total


class HiddenTest(unittest.TestCase):
    def test_other_rates(self):
        self.assertEqual(invoice_total(80.0, 25, 10), 66.0)
        self.assertEqual(invoice_total(10.0, 100), 0.0)
