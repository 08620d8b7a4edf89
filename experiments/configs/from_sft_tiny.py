"""from_sft_smollm2.py's methods on the tiny random model (seconds; for tests and
notebooks): the same task, prompt and evaluation, from a tiny SFT policy that the `:sft` stage
(ppo_prm_steps_tiny.py's) writes first:

    python -m jaxrl_llm.main --config experiments/configs/from_sft_tiny.py:sft \\
        --workdir runs/from_sft_tiny/sft
    python -m jaxrl_llm.main --config experiments/configs/from_sft_tiny.py:ppo \\
        --workdir runs/from_sft_tiny/ppo

The argument after ":" is "sft" or a method: grpo (the default), grpo_best, ppo, online_dpo,
dpo.
"""

from jaxrl_llm.config import make_tiny
from jaxrl_llm.config_files import sibling_config, sibling_module

SFT_MODEL = "runs/from_sft_tiny/sft/model"  # what the `:sft` stage writes


def get_config(stage: str = "grpo"):
    """The tiny config of `stage`: "sft", or a method of from_sft_smollm2.py."""
    full = sibling_module(__file__, "from_sft_smollm2.py")
    full.check_method(stage, "from_sft_tiny.py", ("sft", *full.METHODS))
    if stage == "sft":
        return sibling_config(__file__, "ppo_prm_steps_tiny.py", "sft")
    config = make_tiny(full.get_config(stage))
    with config.unlocked():
        config.model.init = "pretrained"  # the tiny SFT policy's weights and tokenizer
        config.model.name = SFT_MODEL
        config.eval.max_new_tokens = 16
        if stage == "dpo":
            sibling_module(__file__, "dpo_tiny.py").tiny_pair_schedule(config)
        else:
            config.rollout.max_new_tokens = 16
            config.eval.every = 2
    return config
