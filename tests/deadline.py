"""A time budget for a test target: tests not started by a deadline are skipped, by name.

CI has 90 minutes for every target (`.ci/run`); the heavy and slow targets run only while time
allows. Without a bound, a target that started in time could still run past the 90 minutes (stop
56: the slow target started at 51 minutes and was still running at 90), and the whole CI run was
lost. `JAXRL_TEST_DEADLINE` (seconds since the epoch) is that bound: a test whose setup starts
after it is skipped with a reason naming the variable, so the report says which tests did not
run; a test already running finishes, and a failure still fails the target. `tests/conftest.py`
reads it; unset, every test runs.
"""

from __future__ import annotations

import time

DEADLINE_VARIABLE = "JAXRL_TEST_DEADLINE"


def parse_deadline(value: str | None) -> float | None:
    """The deadline in seconds since the epoch, or None when the variable is unset or empty.

    Raises:
      ValueError: naming the variable and the fix, for a value that is not a number.
    """
    if value is None or not value.strip():
        return None
    try:
        return float(value)
    except ValueError:
        raise ValueError(
            f"{DEADLINE_VARIABLE}={value!r} is not a number: give the time after which tests are "
            f"skipped in seconds since the epoch (e.g. $(( $(date +%s) + 3600 ))), or unset it"
        ) from None


def skip_reason(deadline: float | None, now: float | None = None) -> str | None:
    """Why a test starting at `now` (default: the current time) is skipped, or None to run it."""
    if deadline is None:
        return None
    now = time.time() if now is None else now
    if now <= deadline:
        return None
    return (
        f"not started: the target's time budget ran out {now - deadline:.0f} s before "
        f"({DEADLINE_VARIABLE})"
    )
