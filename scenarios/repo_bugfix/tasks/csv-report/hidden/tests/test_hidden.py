import unittest

from report.reader import read_rows


class HiddenTest(unittest.TestCase):
    def test_rows(self):
        rows = read_rows('name,city\nAda,"London, UK"\nBo,Oslo\n')
        self.assertEqual(rows, [{"name": "Ada", "city": "London, UK"}, {"name": "Bo", "city": "Oslo"}])

    def test_header_only(self):
        self.assertEqual(read_rows("a,b\n"), [])
