import unittest

from app import make_slug


class HiddenTest(unittest.TestCase):
    def test_more(self):
        self.assertEqual(make_slug("  A -- B  "), "a-b")
        self.assertEqual(make_slug("Ünïcode Title 2"), "unicode-title-2")
