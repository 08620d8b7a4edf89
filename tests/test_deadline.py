"""The test targets' time budget (tests/deadline.py), which CI's heavy and slow targets use."""

import pytest

from tests.deadline import DEADLINE_VARIABLE, parse_deadline, skip_reason


def test_an_unset_or_empty_deadline_runs_every_test():
    assert parse_deadline(None) is None
    assert parse_deadline("  ") is None
    assert skip_reason(None, now=1e12) is None


def test_a_test_starting_after_the_deadline_is_skipped_with_the_variable_named():
    deadline = parse_deadline("1000")
    assert deadline == 1000.0
    assert skip_reason(deadline, now=999.0) is None
    assert skip_reason(deadline, now=1000.0) is None
    reason = skip_reason(deadline, now=1090.0)
    assert reason is not None and DEADLINE_VARIABLE in reason and "90 s" in reason


def test_a_malformed_deadline_names_the_variable_and_the_fix():
    with pytest.raises(ValueError, match=f"{DEADLINE_VARIABLE}='soon' is not a number.*date"):
        parse_deadline("soon")
