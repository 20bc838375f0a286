"""Hidden tests of the demo task iniconf-bool-case.

They live in the task's tests/ folder, outside the workspace, and are uploaded only to verify.
"""

import os
import sys
import unittest

# the code under test runs in a worker process (_remote.py, beside this file): nothing it
# does can reach these assertions or the result lines the harness reads
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _remote import load

parse, parse_bool = load("iniconf", "parse", "parse_bool")


class FailToPass(unittest.TestCase):
    def test_case_insensitive(self):
        self.assertTrue(parse_bool("TRUE"))
        self.assertTrue(parse_bool("On"))
        self.assertFalse(parse_bool(" No "))


class PassToPass(unittest.TestCase):
    def test_unknown_word(self):
        with self.assertRaises(ValueError):
            parse_bool("maybe")

    def test_parser_untouched(self):
        self.assertEqual(parse("[a]\nk = v  # note\n"), {"a": {"k": "v"}})


if __name__ == "__main__":
    unittest.main()
