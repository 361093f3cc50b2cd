import unittest

from memo.decorator import memoize


class MemoTest(unittest.TestCase):
    def test_recently_used_entry_is_kept(self):
        calls = []

        @memoize(capacity=2)
        def square(x):
            calls.append(x)
            return x * x

        square(1)
        square(2)
        square(1)  # 1 is now the most recently used
        square(3)  # evicts 2, not 1
        self.assertIn((1,), square.cache)
        self.assertNotIn((2,), square.cache)
        self.assertEqual(calls, [1, 2, 3])
