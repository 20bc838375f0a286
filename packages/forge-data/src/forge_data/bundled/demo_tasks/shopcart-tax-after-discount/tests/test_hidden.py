"""Hidden tests of the demo task shopcart-tax-after-discount.

They live in the task's tests/ folder, outside the workspace, and are uploaded only to verify.
"""

import os
import sys
import unittest

# the code under test runs in a worker process (_remote.py, beside this file): nothing it
# does can reach these assertions or the result lines the harness reads
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _remote import load

Cart, total_cents = load("shopcart", "Cart", "total_cents")


class FailToPass(unittest.TestCase):
    def test_tax_on_discounted_amount(self):
        self.assertEqual(total_cents(10000, discount_percent=10, tax_percent=20), 10800)
        self.assertEqual(total_cents(999, discount_percent=50, tax_percent=10), 549)


class PassToPass(unittest.TestCase):
    def test_tax_only(self):
        self.assertEqual(total_cents(1000, tax_percent=7), 1070)

    def test_bad_discount(self):
        with self.assertRaises(ValueError):
            total_cents(100, discount_percent=150)

    def test_cart_untouched(self):
        cart = Cart()
        cart.add("apple", 50, quantity=3)
        cart.remove("apple")
        self.assertEqual(cart.quantity("apple"), 2)


if __name__ == "__main__":
    unittest.main()
