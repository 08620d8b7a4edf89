"""The reward hack the constraints exist for: GRPO on chain_sum with a reward for length.

reward = verifier + 1.0 * min(words / 24, 1). GRPO farms the length term: completions grow to
the cap and the 32-token limit cuts answers off, so verifier accuracy falls (docs/constraints.md).
    python -m jaxrl_llm.main --config experiments/configs/length_hack_smollm2.py --workdir runs/hack
The same run held by the same judges: lagrangian_smollm2.py, crpg_smollm2.py.
"""

from jaxrl_llm.config import grpo_config


def get_config():
    config = grpo_config()
    with config.unlocked():
        config.rewards.length_weight = 1.0
        config.rewards.length_max_words = 24
        # The judges watch (mode "none": they hold nothing), so the hack's violation rates are
        # logged beside the constrained runs' (reward/judge/<name>).
        config.constraints.judges = "length:16,format"
    return config
