"""CGPO's CRRAFT on the main job: imitate each group's best generation among those no judge
flags (verifier-correct, under 16 words, one-number answer).
    python -m jaxrl_llm.main --config experiments/configs/crraft_smollm2.py --workdir runs/crraft
"""

from jaxrl_llm.config import grpo_config


def get_config():
    config = grpo_config()
    with config.unlocked():
        config.constraints.mode = "crraft"
        config.constraints.judges = "length:16,format"
    return config
