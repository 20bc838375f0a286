"""Hidden tests of the demo task iterkit-chunked-tail.

They live in the task's tests/ folder, outside the workspace, and are uploaded only to verify.
"""

import os
import sys
import unittest

# the code under test runs in a worker process (_remote.py, beside this file): nothing it
# does can reach these assertions or the result lines the harness reads
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _remote import load

chunked = load("iterkit", "chunked")


class FailToPass(unittest.TestCase):
    def test_short_tail_is_kept(self):
        self.assertEqual(chunked(range(5), 2), [[0, 1], [2, 3], [4]])
        self.assertEqual(chunked("abc", 5), [["a", "b", "c"]])


class PassToPass(unittest.TestCase):
    def test_exact_multiple(self):
        self.assertEqual(chunked(range(4), 2), [[0, 1], [2, 3]])

    def test_empty(self):
        self.assertEqual(chunked([], 3), [])


if __name__ == "__main__":
    unittest.main()
