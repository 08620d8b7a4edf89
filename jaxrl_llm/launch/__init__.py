"""Sweep launcher: each trial is `python -m jaxrl_llm.main ...` in its own workdir, N at a time.

    python -m jaxrl_llm.launch --config experiments/configs/grpo_tiny.py \\
        --sweep experiments/sweeps/tiny_estimators.py --sweep_dir runs/tiny_estimators

The modules, in the order a sweep runs:
  plan: each trial's config validated, its workdir and command line; `sweep.json`.
  prune: the settings that can no longer meet the rule a new default must meet, skipped.
  backends: the trials run as local subprocesses or as XManager work units.
  sweep: `launch`, the above in turn, and the summary tables of the finished sweep.
  cli: the command line (`python -m jaxrl_llm.launch`, options and layout in its docstring).

Nothing is imported here: `plan` and `backends` import without jax (the XManager test runs them
in a venv that has none), while `prune` reads the report's rules, which need it. Import the
module you use: `from jaxrl_llm.launch import plan`.
"""

__all__: list[str] = []
