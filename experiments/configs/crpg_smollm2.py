"""length_hack_smollm2.py under CGPO's CRPG: a generation any judge flags (over 16 words, or not
a short answer with one number) gets reward 0, the others their reward calibrated against the
group, sigmoid(r - mean r) (docs/constraints.md).
    python -m jaxrl_llm.main --config experiments/configs/crpg_smollm2.py --workdir runs/crpg
"""

import os

from jaxrl_llm.stages import load_config


def get_config():
    here = os.path.dirname(os.path.abspath(__file__))
    config = load_config(os.path.join(here, "length_hack_smollm2.py"))
    with config.unlocked():
        config.constraints.mode = "crpg"
        config.constraints.judges = "length:16,format"
    return config
