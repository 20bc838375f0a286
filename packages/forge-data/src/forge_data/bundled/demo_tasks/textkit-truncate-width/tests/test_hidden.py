"""Hidden tests of the demo task textkit-truncate-width.

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
    def test_result_fits_width(self):
        self.assertEqual(truncate("abcdefghij", 6), "abc...")
        self.assertEqual(len(truncate("x" * 50, 10)), 10)

    def test_custom_ellipsis(self):
        self.assertEqual(truncate("abcdefghij", 5, ellipsis="~"), "abcd~")


class PassToPass(unittest.TestCase):
    def test_fitting_text_unchanged(self):
        self.assertEqual(truncate("short", 10), "short")
        self.assertEqual(truncate("exact", 5), "exact")

    def test_slugify_untouched(self):
        self.assertEqual(slugify("Hello,  World!"), "hello-world")


if __name__ == "__main__":
    unittest.main()
