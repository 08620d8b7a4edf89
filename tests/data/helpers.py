"""Helpers shared by the data tests."""

import ml_collections


def task_section(name, **fields):
    """A run config's `task` section for preset `name` (2,000 training problems, 200 evaluated),
    with `fields` replaced."""
    section = dict(
        name=name, kwargs={}, train_size=2000, eval_size=200, eval_seed=1_000_003,
        held_out_fraction=0.1, selection_fraction=0.1, split_by="problem",
    )  # fmt: skip
    section.update(fields)
    return ml_collections.ConfigDict(section)
