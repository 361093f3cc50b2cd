import unittest

from slugs.site import Site


class SiteTest(unittest.TestCase):
    def test_unique(self):
        s = Site()
        got = [s.slug_for(t) for t in ["Hello World", "hello, world!", "Other", "HELLO WORLD"]]
        self.assertEqual(got, ["hello-world", "hello-world-2", "other", "hello-world-3"])
