import unittest

from invoice import invoice_total


class InvoiceTest(unittest.TestCase):
    def test_no_discount(self):
        self.assertEqual(invoice_total(50.0), 60.0)

    def test_discount_before_tax(self):
        self.assertEqual(invoice_total(100.0, 10), 108.0)
