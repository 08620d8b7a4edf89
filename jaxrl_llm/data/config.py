"""The `config.task` section: which prompts a run trains and is evaluated on, and their format.

The task names a preset of `jaxrl_llm.data.presets` (or any reasoning-gym task); the training
pool and the held-out prompts are drawn from the two sides of a hash split of its questions
(`jaxrl_llm.data.split`).
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
    # Held-out evaluation prompts: eval_size distinct questions of the held-out side, drawn with
    # eval_seed (the same set whatever config.seed).
    c.eval_size = 200
    c.eval_seed = 1_000_003
    # The share of every question space held out: a question's side is a hash of its text
    # (jaxrl_llm.data.split), so no question is both trained on and evaluated.
    c.held_out_fraction = 0.1
    # System message; None keeps the chat template's default.
    c.system_prompt = ml_collections.FieldReference(None, field_type=str)
    # Text appended to every question.
    c.instruction_suffix = ""
    return c
