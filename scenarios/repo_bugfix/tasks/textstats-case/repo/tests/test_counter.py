import unittest

from textstats.counter import top_words, vocabulary_size


class CounterTest(unittest.TestCase):
    def test_top_words(self):
        text = "The cat saw the dog. The dog ran."
        self.assertEqual(top_words(text, 2), [("the", 3), ("dog", 2)])

    def test_vocabulary_ignores_case(self):
        self.assertEqual(vocabulary_size("Apple apple APPLE pie"), 2)
