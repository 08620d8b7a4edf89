"""SFT -> outcome reward model -> PPO against it, on SmolLM2-135M-Instruct and chain_sum, from one
command (each stage's output feeds the next; rerunning resumes at the unfinished stage):
    python -m jaxrl_llm.main --config experiments/configs/pipeline_smollm2.py --workdir runs/pipe
Stages: experiments/configs/sft_smollm2.py, rm_smollm2.py and ppo_smollm2.py, with the RL
reward the reward model's score alone (rewards.task_weight = 0): `reward/accuracy` is still the
verifier's, so reward hacking shows as reward up while accuracy falls. Measured (docs/pipeline.md):
against an RM of 66.7% held-out pairwise accuracy, PPO took held-out accuracy from 71.0% to 5.0%
in 20 steps; add --config.rl.rewards.task_weight=1.0 to keep the verifier in the reward.
Without the SFT stage (the RM's trunk and the policy are then the base model) one seed's RM
(82.8%) led PPO to raise held-out sampled accuracy from 14.9% to 21.1%, another's (72.5%) was
hacked (greedy 19.5% -> 11.5%):
    python -m jaxrl_llm.main --config experiments/configs/pipeline_smollm2.py --workdir runs/pipe \
        --config.stages="('reward_model','rl')" --config.rl.train.num_steps=20"""

import os

from jaxrl_llm.stages import load_config
from jaxrl_llm.stages.pipeline import pipeline_config

HERE = os.path.dirname(os.path.abspath(__file__))


def get_config():
    sft = load_config(os.path.join(HERE, "sft_smollm2.py"))
    rm = load_config(os.path.join(HERE, "rm_smollm2.py"))
    rl = load_config(os.path.join(HERE, "ppo_smollm2.py"))
    with rl.unlocked():
        rl.rewards.task_weight = 0.0
    return pipeline_config(sft, rm, rl)
