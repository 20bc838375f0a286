"""Hidden tests of the demo task statkit-sample-variance.

They live in the task's tests/ folder, outside the workspace, and are uploaded only to verify.
"""

import os
import sys
import unittest

# the code under test runs in a worker process (_remote.py, beside this file): nothing it
# does can reach these assertions or the result lines the harness reads
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _remote import load

median, variance = load("statkit", "median", "variance")


class FailToPass(unittest.TestCase):
    def test_sample_variance_divides_by_n_minus_one(self):
        self.assertAlmostEqual(variance([1, 2, 3, 4]), 5 / 3)
        self.assertAlmostEqual(variance([2, 4]), 2.0)


class PassToPass(unittest.TestCase):
    def test_population_variance(self):
        self.assertAlmostEqual(variance([1, 2, 3, 4], sample=False), 1.25)

    def test_too_few_values(self):
        with self.assertRaises(ValueError):
            variance([1])

    def test_median_untouched(self):
        self.assertEqual(median([4, 1, 3, 2]), 2.5)


if __name__ == "__main__":
    unittest.main()
