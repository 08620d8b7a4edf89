"""GRPO on the guide's own task (docs/your_own_task.md): shopping totals from two JSONL files,
scored by a reward function of the user's, held-out accuracy by the library's one scorer.

    python experiments/your_own_task/make_data.py      # (the files are committed)
    python -m jaxrl_llm.main --config experiments/your_own_task/config.py \\
        --workdir runs/your_own_task
    python -m jaxrl_llm.evaluate --workdir runs/your_own_task \\
        --jsonl experiments/your_own_task/held_out.jsonl

The default recipe of the main job (`experiments/configs/grpo_smollm2.py`: GRPO with the stable
recipe, SmolLM2-135M-Instruct, 30 steps of 8 prompts x 4 completions), with the task's data and
reward swapped in: the built-in task reward is off (weight 0) and `shopping_reward` pays instead;
64 new tokens instead of 32, since the model restates the prices before it adds them.
"""

import os

from jaxrl_llm.config_files import config_from_file

HERE = os.path.dirname(os.path.abspath(__file__))
MAIN_JOB = os.path.join(HERE, "..", "configs", "grpo_smollm2.py")


def get_config():
    config = config_from_file(MAIN_JOB)
    with config.unlocked():
        config.task.name = "shopping"  # the label of its metrics and reports
        config.task.data.train = os.path.join(HERE, "train.jsonl")
        config.task.data.held_out = os.path.join(HERE, "held_out.jsonl")
        config.task.data.key_column = "problem"  # the selection side is split off by problem
        config.rewards.task_weight = 0.0  # the user's reward replaces the built-in one
        config.rewards.chance_correction = False
        config.rewards.functions = os.path.join(HERE, "rewards.py") + ":shopping_reward"
        # the model restates the prices before the total: room for it, in training and held out
        config.rollout.max_new_tokens = 64
        config.eval.max_new_tokens = 64
    return config
