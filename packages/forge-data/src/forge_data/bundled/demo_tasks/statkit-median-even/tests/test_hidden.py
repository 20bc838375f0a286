"""Hidden tests of the demo task statkit-median-even.

They live in the task's tests/ folder, outside the workspace, and are uploaded only to verify.
"""

import os
import sys
import unittest

# the code under test runs in a worker process (_remote.py, beside this file): nothing it
# does can reach these assertions or the result lines the harness reads
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _remote import load

mean, median, variance = load("statkit", "mean", "median", "variance")


class FailToPass(unittest.TestCase):
    def test_even_count_averages_middle_values(self):
        self.assertEqual(median([4, 1, 3, 2]), 2.5)
        self.assertEqual(median([10, 20]), 15)


class PassToPass(unittest.TestCase):
    def test_odd_count(self):
        self.assertEqual(median([7, 1, 5]), 5)

    def test_mean(self):
        self.assertEqual(mean([2, 4]), 3)

    def test_variance_untouched(self):
        self.assertAlmostEqual(variance([1, 2, 3, 4]), 5 / 3)


if __name__ == "__main__":
    unittest.main()
