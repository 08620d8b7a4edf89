"""tests/heavy.py names tests that exist: a renamed test would silently return to the default run."""

import os
import re

from tests.heavy import HEAVY_PREFIXES, is_heavy
from tests.run_helpers import ROOT


def test_every_heavy_entry_names_a_test_function_in_its_file():
    for prefix in HEAVY_PREFIXES:
        path, _, name = prefix.partition("::")
        assert os.path.isfile(os.path.join(ROOT, path)), prefix
        function = re.match(r"test_\w+", name).group(0)
        with open(os.path.join(ROOT, path)) as f:
            source = f.read()
        # a prefix cut inside the name matches the start of a defined test function
        assert re.search(rf"^def {function}", source, re.MULTILINE), prefix


def test_prefixes_take_their_parametrizations_and_nothing_else():
    assert is_heavy(
        "tests/faults/test_faults.py::test_empty_step_directory_is_moved_aside[grpo_async]"
    )
    assert not is_heavy(
        "tests/faults/test_faults.py::test_empty_step_directory_is_moved_aside[grpo]"
    )
    assert is_heavy(
        "tests/stages/test_preference_runs.py::test_offline_preference_learns_the_pairs[kto]"
    )
    assert not is_heavy(
        "tests/runners/test_grpo_run.py::test_sigkill_and_resume_reproduces_every_later_step"
    )
