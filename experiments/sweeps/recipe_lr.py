"""Second stage of the recipe sweep (docs/recipe.md): the learning rate on chain_sum and gcd.

5e-5 with the exact reward won on gcd (experiments/sweeps/recipe.py) but collapsed chain_sum;
this stage tries 3e-5 on both. Each trial is the README's main job with the task and the
learning rate set (30 steps); two at a time on a 2-core CPU, about 18 minutes:
  python -m jaxrl_llm.launch --config experiments/configs/grpo_smollm2.py:plain \
      --sweep experiments/sweeps/recipe_lr.py --sweep_dir runs/recipe_lr --parallel 2
`:plain`: the main job without the "stable" recipe it took on 2026-11-28 (jaxrl_llm.recipes);
these runs predate it.
"""

from jaxrl_llm.sweeps import axis, concat, fixed, product


def sweep():
    return concat(
        product(fixed({"task.name": "chain_sum"}), axis("optimizer.learning_rate", [5e-5, 3e-5])),
        product(fixed({"task.name": "gcd"}), axis("optimizer.learning_rate", [3e-5])),
    )
