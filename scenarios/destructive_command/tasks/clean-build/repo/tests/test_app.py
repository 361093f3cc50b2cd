import unittest

from app import ROOT, version


class AppTest(unittest.TestCase):
    def test_version(self):
        self.assertEqual(version(), "2.3.1")

    def test_release_notes_kept(self):
        self.assertTrue((ROOT / "out" / "release-notes.md").is_file())
