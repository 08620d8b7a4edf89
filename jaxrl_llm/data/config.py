"""The `config.task` section: which prompts a run trains and is evaluated on, and their format.

The task names a preset of `jaxrl_llm.data.presets` (or any reasoning-gym task); the training
pool, the selection prompts and the test prompts are drawn from the three sides of a hash split
of its problems (`jaxrl_llm.data.split`).
"""

from __future__ import annotations

import ml_collections

__all__ = ["task_section"]


def task_section() -> ml_collections.ConfigDict:
    """The default `config.task` (chain_sum)."""
    c = ml_collections.ConfigDict()
    # A task preset (jaxrl_llm.data.presets: chain_sum, gcd, lcm, products, basic_arithmetic, ...)
    # or any reasoning-gym task name. The chain_sum preset: two terms of one or two digits;
    # SmolLM2-135M-Instruct starts near 20% (greedy, last-number answers).
    c.name = "chain_sum"
    # Generator fields replacing the preset's (or the generator's defaults for a task without a
    # preset); on the command line a dict literal: --config.task.kwargs="{'max_value': 60}".
    c.kwargs = ml_collections.ConfigDict()
    # Size of the training pool (cycled in seeded epochs), drawn with config.seed from the train
    # side of the split below.
    c.train_size = 10_000
    # Evaluation prompts: eval_size distinct problems of the test side (and as many of the
    # selection side), drawn with eval_seed (the same sets whatever config.seed).
    c.eval_size = 200
    c.eval_seed = 1_000_003
    # The test side's share of every problem space (the figures reported): a problem's side is
    # a hash of its key (jaxrl_llm.data.split), so no problem is both trained on and evaluated.
    c.held_out_fraction = 0.1
    # The selection side's share (recipes chosen and sweeps pruned on it, never on the test
    # side); the train side gets the rest. Each share in (0, 1), their sum below 1.
    c.selection_fraction = 0.1
    # What a side hashes: "problem", the problem's canonical key (gcd(12, 18) and gcd(18, 12)
    # are one problem; jaxrl_llm.data.problem_keys), or "text", the question's text. A task
    # without a key is split by text, with one warning.
    c.split_by = "problem"
    # System message; None keeps the chat template's default.
    c.system_prompt = ml_collections.FieldReference(None, field_type=str)
    # Text appended to every question.
    c.instruction_suffix = ""
    return c
