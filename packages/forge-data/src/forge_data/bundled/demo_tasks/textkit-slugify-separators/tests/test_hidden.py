"""Hidden tests of the demo task textkit-slugify-separators.

They live in the task's tests/ folder, outside the workspace, and are uploaded only to verify.
"""

import os
import sys
import unittest

# the code under test runs in a worker process (_remote.py, beside this file): nothing it
# does can reach these assertions or the result lines the harness reads
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _remote import load

slugify, truncate = load("textkit", "slugify", "truncate")


class FailToPass(unittest.TestCase):
    def test_runs_collapse_to_one_separator(self):
        self.assertEqual(slugify("Hello,  World!"), "hello-world")
        self.assertEqual(slugify("a -- b"), "a-b")

    def test_custom_separator_is_not_repeated(self):
        self.assertEqual(slugify("one, two", separator="_"), "one_two")


class PassToPass(unittest.TestCase):
    def test_simple_words(self):
        self.assertEqual(slugify("Hello World"), "hello-world")

    def test_no_leading_or_trailing_separator(self):
        self.assertEqual(slugify("!hi!"), "hi")

    def test_truncate_untouched(self):
        self.assertEqual(truncate("abcdefghij", 6), "abc...")


if __name__ == "__main__":
    unittest.main()
