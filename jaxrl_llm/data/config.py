"""The `config.task` section: which prompts a run trains and is evaluated on, and their format.

The task names a preset of `jaxrl_llm.data.presets` (or any reasoning-gym task); the training
pool, the selection prompts and the test prompts are drawn from the three sides of a hash split
of its problems (`jaxrl_llm.data.split`). With `data.train` set, the prompts are the user's own
rows instead (`jaxrl_llm.data.user_data`; docs/your_own_task.md), split by the same rule.
"""

from __future__ import annotations

import ml_collections

__all__ = ["data_section", "task_section", "validate_data_section"]


def data_section() -> ml_collections.ConfigDict:
    """The default `config.task.data`: no file of the user's (the task preset's prompts)."""
    c = ml_collections.ConfigDict()
    # The user's prompts: a .jsonl/.json, .parquet or .arrow file, a directory written by
    # datasets' save_to_disk ("DIR:SPLIT" for one split of a DatasetDict), or
    # "tfds:<file.jsonl>"; read offline. "" = the task preset's. config.task.name then only
    # labels the set in metrics and reports. The train side is every train-side row
    # (train_size does not apply); eval_size rows of the test side are evaluated.
    c.train = ""
    # A held-out file (same formats): the test side; the selection side is then carved from
    # `train` by the hash rule. "" = all three sides from `train` by the presets' split rule.
    c.held_out = ""
    # The column holding the prompt: a string, or chat messages [{"role", "content"}, ...]
    # (system / user / assistant, ending with the user's), rendered as that conversation.
    c.prompt_column = "prompt"
    # The column holding the reference answer; rows may lack it (all of them) only when
    # config.rewards.task_weight=0. Every other column reaches the reward functions.
    c.answer_column = "answer"
    # A column whose value is a row's problem key (rows sharing one land on one side);
    # "" = the prompt text.
    c.key_column = ""
    # "auto" (from the path), "jsonl", "json", "parquet", "arrow", "dataset" or "tfds".
    c.format = "auto"
    return c


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
    # Prompts of the user's own (a file or a saved dataset) instead of the preset's.
    c.data = data_section()
    return c


def validate_data_section(config: ml_collections.ConfigDict) -> None:
    """Reads `config.task.data` (if set) and raises one line naming the field or file at
    fault and the fix; the run's evaluated sides are checked by `presets.task_pool`.

    Example:
      >>> validate_data_section(config)   # config.task.data.train="prompts.jsonl"
    """
    from jaxrl_llm.data.user_data import load_user_data, user_pool, uses_user_data
    from jaxrl_llm.data.user_rows import DATA_FORMATS

    data = config.task.get("data")
    if not uses_user_data(config.task):
        if data and data.get("held_out"):
            raise ValueError(
                f"config.task.data.held_out={data.held_out!r} needs config.task.data.train "
                "(the prompts trained on)."
            )
        return
    if data.format not in DATA_FORMATS or not data.prompt_column or not data.answer_column:
        raise ValueError(
            f"config.task.data.format={data.format!r} must be one of {DATA_FORMATS}, and "
            "config.task.data.prompt_column / answer_column non-empty."
        )
    if not load_user_data(config.task).has_answers and config.rewards.task_weight:
        raise ValueError(
            f"config.task.data.train={data.train!r} has no answer column "
            f"{data.answer_column!r}: name it with config.task.data.answer_column, or set "
            "config.rewards.task_weight=0 and score with your own config.rewards.functions."
        )
    user_pool(config.task, side="train", seed=config.seed)  # an empty train side stops here
