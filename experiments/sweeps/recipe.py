"""The sweep that chose the default recipe (docs/recipe.md): learning rate x reward on gcd.

gcd (two numbers up to 30) is the task the old recipe helped least. Each trial is the README's
main job (30 steps of 8 prompts x 4 completions, 32 new tokens) with the task, the learning rate
and the task reward's partial credit set; about 11 minutes a trial on a 2-core CPU:
  python -m jaxrl_llm.launch --config experiments/configs/grpo_smollm2.py:plain \
      --sweep experiments/sweeps/recipe.py --sweep_dir runs/recipe --parallel 1
Then experiments/sweeps/recipe_tasks.py runs the chosen recipe on the other tasks.
`:plain`: the main job without the "stable" recipe it took on 2026-11-28 (jaxrl_llm.recipes);
these runs predate it.
"""

from jaxrl_llm.sweeps import axis, fixed, product


def sweep():
    return product(
        fixed({"task.name": "gcd"}),
        axis("rewards.partial_credit", [True, False]),
        axis("optimizer.learning_rate", [2e-5, 5e-5]),
    )
