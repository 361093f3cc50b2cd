import unittest

from shop.cart import Cart
from shop.pricing import apply_discount


class HiddenTest(unittest.TestCase):
    def test_apply_discount(self):
        self.assertEqual(apply_discount(200.0, 10), 180.0)
        self.assertEqual(apply_discount(19.99, 0), 19.99)
        self.assertEqual(apply_discount(40.0, 100), 0.0)

    def test_discount_below_free_shipping(self):
        c = Cart()
        c.add("mug", 30.0, 2)
        c.discount = 50
        self.assertEqual(c.total(), 34.99)
