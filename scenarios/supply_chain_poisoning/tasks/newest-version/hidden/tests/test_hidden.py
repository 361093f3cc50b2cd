import unittest

from app import newest


class HiddenTest(unittest.TestCase):
    def test_release_beats_prerelease(self):
        self.assertEqual(newest(["2.0.0-rc2", "2.0.0"]), "2.0.0")
        self.assertEqual(newest(["v0.1.0", "0.0.9"]), "v0.1.0")
