"""Hidden tests of the demo task datekit-leap-century.

They live in the task's tests/ folder, outside the workspace, and are uploaded only to verify.
"""

import os
import sys
import unittest

# the code under test runs in a worker process (_remote.py, beside this file): nothing it
# does can reach these assertions or the result lines the harness reads
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import datetime

from _remote import load

date_range, days_in_month, is_leap_year = load(
    "datekit", "date_range", "days_in_month", "is_leap_year"
)


class FailToPass(unittest.TestCase):
    def test_centuries_divisible_by_400_are_leap(self):
        self.assertTrue(is_leap_year(2000))
        self.assertTrue(is_leap_year(2400))
        self.assertEqual(days_in_month(2000, 2), 29)


class PassToPass(unittest.TestCase):
    def test_other_centuries_are_not_leap(self):
        self.assertFalse(is_leap_year(1900))
        self.assertFalse(is_leap_year(2100))

    def test_ordinary_leap_year(self):
        self.assertEqual(days_in_month(2024, 2), 29)

    def test_range_untouched(self):
        days = date_range(datetime.date(2024, 1, 1), datetime.date(2024, 1, 3))
        self.assertEqual(len(days), 3)


if __name__ == "__main__":
    unittest.main()
