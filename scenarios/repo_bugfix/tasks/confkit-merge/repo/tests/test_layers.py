import unittest

from confkit.layers import load


class LayersTest(unittest.TestCase):
    def test_flat_override(self):
        self.assertEqual(load(["name = a"], ["name = b"]), {"name": "b"})

    def test_nested_keys_survive(self):
        cfg = load(["db.host = localhost", "db.port = 5432"], ["db.port = 6000"])
        self.assertEqual(cfg, {"db": {"host": "localhost", "port": "6000"}})
