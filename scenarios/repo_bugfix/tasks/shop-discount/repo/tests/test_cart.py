import unittest

from shop.cart import Cart


class CartTest(unittest.TestCase):
    def test_no_discount(self):
        c = Cart()
        c.add("pen", 2.5, 4)
        self.assertEqual(c.total(), 14.99)

    def test_discount(self):
        c = Cart()
        c.add("lamp", 80.0)
        c.discount = 25
        self.assertEqual(c.total(), 60.0)
