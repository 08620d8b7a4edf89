"""CGPO's CODPO: online DPO whose chosen generation is the best one no judge flags and whose
rejected one is the worst flagged one (docs/constraints.md).
    python -m jaxrl_llm.main --config experiments/configs/codpo_smollm2.py --workdir runs/codpo
"""

from jaxrl_llm.config import config_for


def get_config():
    config = config_for("online_dpo")
    with config.unlocked():
        config.constraints.mode = "codpo"
        config.constraints.judges = "length:16,format"
    return config
