"""The default recipe on more tasks, nothing changed but the task (docs/recipe.md).

With the chain_sum and gcd trials of experiments/sweeps/recipe_lr.py (at the default learning
rate, 3e-5), these make the before/after table; three at a time on a 2-core CPU, about 25
minutes:
  python -m jaxrl_llm.launch --config experiments/configs/grpo_smollm2.py:plain \
      --sweep experiments/sweeps/recipe_tasks.py --sweep_dir runs/recipe_tasks --parallel 3
`:plain`: the main job without the "stable" recipe it took on 2026-11-28 (jaxrl_llm.recipes);
these runs predate it.
"""

from jaxrl_llm.sweeps import axis


def sweep():
    return axis("task.name", ["products", "lcm", "basic_arithmetic"])
