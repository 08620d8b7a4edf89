"""ppo_prm_steps_smollm2.py's three stages on the tiny random model (seconds; for tests and
notebooks): the same task and prompt, `:sft`, `:prm` or the default PPO with dense process
rewards, whose process model (rewards.process_model) the `:prm` stage writes:

    python -m jaxrl_llm.main --config experiments/configs/ppo_prm_steps_tiny.py:prm \\
        --workdir runs/prm_steps_tiny/prm
    python -m jaxrl_llm.main --config experiments/configs/ppo_prm_steps_tiny.py \\
        --workdir runs/prm_steps_tiny/rl
"""

from jaxrl_llm.config import make_tiny
from jaxrl_llm.config_files import sibling_config


def get_config(stage: str = "rl"):
    """The tiny config of `stage` ("sft", "prm" or "rl")."""
    config = make_tiny(sibling_config(__file__, "ppo_prm_steps_smollm2.py", stage))
    with config.unlocked():
        config.model.name = "smollm2-135m-instruct"  # the random model's tokenizer
        config.eval.max_new_tokens = 16
        if stage == "sft":
            config.train.num_steps = 6
            config.train.checkpoint_every = 3
            config.sft.batch_size = 4
            config.sft.max_length = 128
            config.sft.eval_records = 8
            config.sft.eval_every = 3
            config.optimizer.learning_rate = 3e-3
        elif stage == "prm":
            config.train.num_steps = 6
            config.train.checkpoint_every = 3
            config.prm.num_prompts = 4
            config.prm.group_size = 2
            config.prm.rollouts = 2
            config.prm.max_new_tokens = 12
            config.prm.batch_size = 4
            config.prm.max_length = 128
            config.prm.eval_every = 0
            config.optimizer.learning_rate = 3e-3
        else:
            config.rollout.max_new_tokens = 16
            config.rewards.process_model = "runs/prm_steps_tiny/prm/process_reward_model"
    return config
