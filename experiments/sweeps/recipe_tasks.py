"""The default recipe on more tasks, nothing changed but the task (docs/recipe.md).

With experiments/sweeps/recipe.py's gcd trial at the defaults, these make the before/after
table; about 11 minutes a trial on a 2-core CPU:
  python -m jaxrl_llm.launch --config experiments/configs/grpo_smollm2.py \
      --sweep experiments/sweeps/recipe_tasks.py --sweep_dir runs/recipe_tasks --parallel 1
"""

from jaxrl_llm.sweeps import axis


def sweep():
    return axis("task.name", ["chain_sum", "products", "lcm", "basic_arithmetic"])
