"""The sweep that chose the default recipe (docs/recipe.md): learning rate on two tasks.

Each trial is the README's main job with only the task and the learning rate changed (30 steps
of 8 prompts x 4 completions, 32 new tokens), about 12 minutes on a 2-core CPU:
  python -m jaxrl_llm.launch --config experiments/configs/grpo_smollm2.py \
      --sweep experiments/sweeps/recipe.py --sweep_dir runs/recipe --parallel 1
then `python -m jaxrl_llm.plots runs/recipe --out runs/recipe/plots`.
"""

from jaxrl_llm.sweeps import axis, product


def sweep():
    return product(
        axis("task.name", ["gcd", "products"]),
        axis("optimizer.learning_rate", [2e-5, 5e-5]),
    )
