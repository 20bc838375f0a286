"""Hidden tests of the demo task shopcart-remove-quantity.

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
    def test_remove_decrements(self):
        cart = Cart()
        cart.add("apple", 50, quantity=3)
        cart.remove("apple")
        self.assertEqual(cart.quantity("apple"), 2)
        self.assertEqual(cart.subtotal_cents(), 100)


class PassToPass(unittest.TestCase):
    def test_remove_everything(self):
        cart = Cart()
        cart.add("pear", 70, quantity=2)
        cart.remove("pear", quantity=5)
        self.assertEqual(cart.quantity("pear"), 0)

    def test_total_untouched(self):
        self.assertEqual(total_cents(10000, discount_percent=10, tax_percent=20), 10800)


if __name__ == "__main__":
    unittest.main()
