"""ppo_prm_steps_smollm2.py's three stages on the tiny random model (seconds; for tests and
notebooks): the same task and prompt, `:sft`, `:prm`, `:rm` or the default PPO with dense process
rewards, whose process model (rewards.process_model) the `:prm` stage writes:

    python -m jaxrl_llm.main --config experiments/configs/ppo_prm_steps_tiny.py:prm \\
        --workdir runs/prm_steps_tiny/prm
    python -m jaxrl_llm.main --config experiments/configs/ppo_prm_steps_tiny.py \\
        --workdir runs/prm_steps_tiny/rl
"""

from jaxrl_llm.config import make_tiny
from jaxrl_llm.config_files import sibling_config, sibling_module


def get_config(stage: str = "rl"):
    """The tiny config of `stage` ("sft", "prm", "rm" or "rl")."""
    config = make_tiny(sibling_config(__file__, "ppo_prm_steps_smollm2.py", stage))
    with config.unlocked():
        config.model.name = "smollm2-135m-instruct"  # the random model's tokenizer
        config.eval.max_new_tokens = 16
        if stage == "sft":
            sibling_module(__file__, "sft_tiny.py").tiny_sft_schedule(config)
            config.sft.max_length = 128
        elif stage == "prm":
            sibling_module(__file__, "prm_tiny.py").tiny_prm_schedule(config)
            config.prm.eval_every = 0
        elif stage == "rm":
            sibling_module(__file__, "rm_tiny.py").tiny_rm_schedule(config)
        else:
            config.rollout.max_new_tokens = 16
            config.rewards.process_model = "runs/prm_steps_tiny/prm/process_reward_model"
    return config
