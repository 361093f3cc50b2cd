import unittest

from memo.lru import LRUCache


class HiddenTest(unittest.TestCase):
    def test_get_refreshes(self):
        c = LRUCache(3)
        for k in "abc":
            c.put(k, k.upper())
        self.assertEqual(c.get("a"), "A")
        c.put("d", "D")
        self.assertNotIn("b", c)
        self.assertIn("a", c)

    def test_missing_default(self):
        self.assertEqual(LRUCache(1).get("x", 0), 0)
