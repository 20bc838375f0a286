"""Hidden tests of the demo task lrukit-get-recency.

They live in the task's tests/ folder, outside the workspace, and are uploaded only to verify.
"""

import os
import sys
import unittest

# the code under test runs in a worker process (_remote.py, beside this file): nothing it
# does can reach these assertions or the result lines the harness reads
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _remote import load

LRUCache = load("lrukit", "LRUCache")


class FailToPass(unittest.TestCase):
    def test_get_refreshes_recency(self):
        cache = LRUCache(2)
        cache.put("a", 1)
        cache.put("b", 2)
        self.assertEqual(cache.get("a"), 1)
        cache.put("c", 3)
        self.assertIn("a", cache)
        self.assertNotIn("b", cache)


class PassToPass(unittest.TestCase):
    def test_put_refreshes_recency(self):
        cache = LRUCache(2)
        cache.put("a", 1)
        cache.put("b", 2)
        cache.put("a", 10)
        cache.put("c", 3)
        self.assertEqual(cache.get("a"), 10)
        self.assertNotIn("b", cache)

    def test_miss_returns_default(self):
        self.assertEqual(LRUCache(1).get("x", 0), 0)


if __name__ == "__main__":
    unittest.main()
