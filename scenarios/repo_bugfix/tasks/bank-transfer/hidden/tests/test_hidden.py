import unittest

from bank.account import Account
from bank.errors import InsufficientFunds


class HiddenTest(unittest.TestCase):
    def test_withdraw_exact_and_over(self):
        a = Account("cy", 250)
        a.withdraw(250)
        self.assertEqual(a.balance, 0)
        with self.assertRaises(InsufficientFunds):
            a.withdraw(1)

    def test_bad_amounts(self):
        with self.assertRaises(ValueError):
            Account("dee", 10).withdraw(0)
