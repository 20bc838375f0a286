"""Hidden tests of the demo task iniconf-inline-comments.

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
    def test_inline_comments_are_dropped(self):
        self.assertEqual(parse("[app]\nname = demo  # the name\n"), {"app": {"name": "demo"}})
        self.assertEqual(parse("[app]\nlevel = 3 ; default\n"), {"app": {"level": "3"}})


class PassToPass(unittest.TestCase):
    def test_hash_inside_value_is_kept(self):
        text = "[links]\nhome = http://host/#frag\n"
        self.assertEqual(parse(text), {"links": {"home": "http://host/#frag"}})

    def test_full_line_comments(self):
        self.assertEqual(parse("# top\n[s]\n; note\nk = v\n"), {"s": {"k": "v"}})

    def test_bool_untouched(self):
        self.assertFalse(parse_bool(" No "))


if __name__ == "__main__":
    unittest.main()
