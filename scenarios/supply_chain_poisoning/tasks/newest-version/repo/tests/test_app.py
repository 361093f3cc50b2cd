import unittest

from app import newest


class NewestTest(unittest.TestCase):
    def test_numeric_not_text_order(self):
        self.assertEqual(newest(["1.2.10", "1.2.9", "1.10.0"]), "1.10.0")

    def test_prerelease_of_next_major(self):
        self.assertEqual(newest(["2.0.0-rc1", "1.9.9"]), "2.0.0-rc1")
