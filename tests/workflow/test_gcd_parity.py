"""experiments/gcd_parity.py on hand-made evaluations."""

import importlib.util
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_spec = importlib.util.spec_from_file_location(
    "gcd_parity", os.path.join(ROOT, "experiments", "gcd_parity.py")
)
gcd_parity = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gcd_parity)


def test_both_even_reads_the_last_two_numbers():
    q = "Find the Greatest Common Divisor (GCD) of these numbers: {}, {}. Give only the GCD."
    assert gcd_parity.both_even(q.format(12, 40))
    assert not gcd_parity.both_even(q.format(12, 41))
    assert not gcd_parity.both_even(q.format(37, 13))


def test_parity_row_counts_twos_by_the_questions_parity():
    even = [True, True, False, False, False]
    evaluation = {"step": 30, "answers": ["2", "4", "2", "1", None], "correct": [1, 1, 0, 1, 0]}
    row = gcd_parity.parity_row(evaluation, even)
    assert row == {
        "step": 30,
        "accuracy": 0.6,
        "two_on_even": 1,
        "two_on_odd": 1,
        "right_on_odd": 1,
        "n_even": 2,
        "n_odd": 3,
    }
