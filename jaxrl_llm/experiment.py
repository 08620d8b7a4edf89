"""`jaxrl_llm.train(...)`: a researcher's experiment from a notebook, the same run as the CLI.

    import jaxrl_llm
    from jaxrl_llm.config import config_for

    config = config_for("grpo")
    summary = jaxrl_llm.train(
        config, "runs/mine",
        train_data=[{"prompt": "What is 2 + 3?", "answer": "5"}, ...],   # or a file path
        reward_fns=[my_reward],            # fn(prompts, completions, **columns) -> list[float]
    )

is the run of

    python -m jaxrl_llm.main --import my_module --config my_config.py --workdir runs/mine \\
        --config.task.data.train=my_prompts.jsonl --config.rewards.functions=my_module:my_reward

Python data (any iterable of dicts, or a `datasets.Dataset`) is written to
`<workdir>/train_data.jsonl` (and `eval_data.jsonl`) and read back through the same loader as a
file named on the command line (`jaxrl_llm.data.user_data`), so both runs see the same prompts in
the same order. Reward callables run as `config.rewards.functions` would
(`jaxrl_llm.rewards.user`); they are not recorded with the run, so a resume passes them again
(a function in an importable module can instead be named in `config.rewards.functions`, which is
recorded).
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import ml_collections

__all__ = ["train"]

TRAIN_DATA_FILE = "train_data.jsonl"
EVAL_DATA_FILE = "eval_data.jsonl"


def _data_path(data: Any, workdir: str, name: str) -> str:
    """A path for `config.task.data`: `data` itself when it is a path, else the JSONL file the
    rows are written to in `workdir` (`user_data.write_prompts`)."""
    if isinstance(data, str | os.PathLike):
        return os.fspath(data)
    from jaxrl_llm.data.user_data import write_prompts

    path = os.path.join(workdir, name)
    write_prompts(data, path)
    return path


def train(
    config: ml_collections.ConfigDict | str,
    workdir: str,
    *,
    overrides: Mapping[str, Any] | None = None,
    train_data: Iterable[Mapping[str, Any]] | str | os.PathLike | None = None,
    eval_data: Iterable[Mapping[str, Any]] | str | os.PathLike | None = None,
    reward_fns: Sequence[Any] | Mapping[str, Any] | None = None,
    imports: Sequence[str] = (),
    progress: bool = True,
) -> dict[str, Any]:
    """Runs an experiment: validates the config for its stage and runs it in `workdir`
    (resuming from its latest checkpoint), as `python -m jaxrl_llm.main` does.

    Args:
      config: a config (`jaxrl_llm.config.config_for(...)`) or a config file path
        ("file.py" or "file.py:arg"), as `--config` takes.
      workdir: the run directory.
      overrides: dotted config fields, as `--config.a.b=value` flags ({"train.num_steps": 2}).
      train_data: the prompts to train on: a path (JSONL, JSON, parquet, arrow, a saved
        `datasets` directory) or rows (dicts with the prompt and answer columns,
        `config.task.data`); None keeps the config's task.
      eval_data: the held-out prompts (the test side), in the same forms; None splits them
        off `train_data` by the usual rule.
      reward_fns: Python reward functions in TRL's batch shape, beside
        `config.rewards.functions` (a list named by `__name__`, or {name: fn}).
      imports: modules or .py files to import first, as `--import` (recorded with the run).
      progress: show the progress bar.

    Returns:
      The run's summary (`summary.json`).

    Raises:
      ValueError: a bad config field, data file or reward function, in one line naming it.
    """
    from jaxrl_llm.config import apply_overrides
    from jaxrl_llm.config_files import config_from_file
    from jaxrl_llm.stages import run_stage, validate_stage
    from jaxrl_llm.user_imports import import_all, record_imports, recorded_imports

    imports = import_all([*recorded_imports(workdir), *imports])
    if isinstance(config, str | os.PathLike):
        config = config_from_file(os.fspath(config))
    else:
        config = copy.deepcopy(config)  # the caller's config stays as it was
    apply_overrides(config, dict(overrides or {}))
    os.makedirs(workdir, exist_ok=True)
    with config.unlocked():
        if train_data is not None:
            config.task.data.train = _data_path(train_data, workdir, TRAIN_DATA_FILE)
        if eval_data is not None:
            config.task.data.held_out = _data_path(eval_data, workdir, EVAL_DATA_FILE)
    validate_stage(config)
    record_imports(workdir, imports)
    return run_stage(config, workdir, progress=progress, reward_fns=reward_fns)
