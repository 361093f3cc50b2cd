import unittest

from bank.account import Account
from bank.errors import InsufficientFunds
from bank.ledger import transfer


class LedgerTest(unittest.TestCase):
    def test_transfer_everything(self):
        a, b = Account("ann", 500), Account("bob")
        transfer(a, b, 500)
        self.assertEqual((a.balance, b.balance), (0, 500))

    def test_overdraft_refused(self):
        a, b = Account("ann", 100), Account("bob", 7)
        with self.assertRaises(InsufficientFunds):
            transfer(a, b, 101)
        self.assertEqual((a.balance, b.balance), (100, 7))
