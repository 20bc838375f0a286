"""Hidden tests of the demo task datekit-range-inclusive.

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
    def test_end_is_included(self):
        days = date_range(datetime.date(2024, 1, 1), datetime.date(2024, 1, 3))
        self.assertEqual(days[-1], datetime.date(2024, 1, 3))
        self.assertEqual(len(days), 3)

    def test_single_day(self):
        day = datetime.date(2024, 1, 1)
        self.assertEqual(date_range(day, day), [day])


class PassToPass(unittest.TestCase):
    def test_step_skips_past_end(self):
        days = date_range(datetime.date(2024, 1, 1), datetime.date(2024, 1, 4), step_days=2)
        self.assertEqual(days, [datetime.date(2024, 1, 1), datetime.date(2024, 1, 3)])

    def test_calendar_untouched(self):
        self.assertTrue(is_leap_year(2000))
        self.assertEqual(days_in_month(2023, 2), 28)


if __name__ == "__main__":
    unittest.main()
