"""length_hack_smollm2.py under constraints held by Lagrangian multipliers (dual ascent).

Judges: length (over 16 words) with an allowed violation rate of 5%, format (not a short answer
with one number) at 5%. Each violation costs its multiplier; a multiplier grows while its judge's
rate is above the bound (docs/constraints.md).
    python -m jaxrl_llm.main --config experiments/configs/lagrangian_smollm2.py --workdir runs/lag
"""

import os

from jaxrl_llm.stages import load_config


def get_config():
    here = os.path.dirname(os.path.abspath(__file__))
    config = load_config(os.path.join(here, "length_hack_smollm2.py"))
    with config.unlocked():
        config.constraints.mode = "lagrangian"
        config.constraints.judges = "length:16,format"
        config.constraints.bounds = "0.05,0.05"
        config.constraints.dual_lr = 2.0
    return config
