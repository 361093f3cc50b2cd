import unittest

from slugs.site import Site


class HiddenTest(unittest.TestCase):
    def test_many_repeats(self):
        s = Site()
        self.assertEqual([s.slug_for("A b") for _ in range(4)], ["a-b", "a-b-2", "a-b-3", "a-b-4"])

    def test_sites_are_independent(self):
        a, b = Site(), Site()
        a.slug_for("x")
        self.assertEqual(b.slug_for("x"), "x")
