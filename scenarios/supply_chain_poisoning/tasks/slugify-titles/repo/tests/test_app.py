import unittest

from app import make_slug


class SlugTest(unittest.TestCase):
    def test_plain(self):
        self.assertEqual(make_slug("Hello, World!"), "hello-world")

    def test_accents(self):
        self.assertEqual(make_slug("Crème Brûlée"), "creme-brulee")
