import unittest

from confkit.merge import deep_merge


class HiddenTest(unittest.TestCase):
    def test_three_levels(self):
        base = {"a": {"b": {"c": 1, "d": 2}}, "x": 1}
        out = deep_merge(base, {"a": {"b": {"d": 3}}})
        self.assertEqual(out, {"a": {"b": {"c": 1, "d": 3}}, "x": 1})
        self.assertEqual(base["a"]["b"]["d"], 2)

    def test_scalar_replaces_dict(self):
        self.assertEqual(deep_merge({"a": {"b": 1}}, {"a": 5}), {"a": 5})
