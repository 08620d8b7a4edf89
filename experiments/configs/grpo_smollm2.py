"""GRPO on SmolLM2-135M-Instruct and reasoning-gym chain_sum: the README's main job.

The library's GRPO with the "stable" recipe (`jaxrl_llm.recipes`: the verifiers without the
known hacks, dynamic sampling, KL 0.04 to the initial policy, a cosine rate, temperature 1, an
entropy floor), chosen by the stabiliser sweep (docs/recipe.md). 30 steps of 8 prompts x
4 completions; about 30 minutes on a 2-core CPU, evaluation before and after included.

    experiments/configs/grpo_smollm2.py         # the main job: the "stable" recipe
    experiments/configs/grpo_smollm2.py:plain   # the library's defaults: the main job before
                                                # 2026-11-28, what the older sweeps ran

Override any field on the command line, e.g. `--config.train.num_steps=5`.
"""

from jaxrl_llm.config import grpo_config
from jaxrl_llm.recipes import apply_recipe


def get_config(recipe: str = "stable"):
    return apply_recipe(grpo_config(), recipe)
