import unittest

from textstats.counter import top_words
from textstats.tokenize import words


class HiddenTest(unittest.TestCase):
    def test_words(self):
        self.assertEqual(words("Don't STOP, 'Believing'!"), ["don't", "stop", "believing"])

    def test_ties(self):
        self.assertEqual(top_words("B a A b C", 3), [("a", 2), ("b", 2), ("c", 1)])
