"""Which of PPO's levers matter from the chain_sum_steps SFT policy: success-only PPO
(experiments/configs/from_sft_smollm2.py:ppo) at a "best" setting, then once with each lever
turned off, 3 seeds each (18 runs, one or two at a time on a 2-core CPU; the 3 without the
larger batch are the methods table's PPO, whose runs serve, so 15 are launched).

The best setting (BEST_PPO) holds the levers docs/ppo.md says Xu et al. ("Is DPO Superior to
PPO for LLM Alignment?", 2404.10719) recommend, with VC-PPO's value pretraining (2503.01491):
advantage whitening, a larger batch (twice the prompts a step, as two accumulated micro-batches
of the table's size), a reference that follows the policy as a moving average, and the critic
pretrained on the SFT policy's rollouts; and the rate the probes (experiments/sweeps/
ppo_sft_probes.py) chose on the selection side, a third of the one that fell (3e-6: +4.5
points there in 12 steps, where 1e-5 lost 13.0; one seed). The probes read the selection side
only, never the test side these runs report; the last probe runs this setting itself before
the final runs:

    python -m jaxrl_llm.launch --config experiments/configs/from_sft_smollm2.py:ppo \\
        --sweep experiments/sweeps/ppo_lever_ablation.py --sweep_dir runs/ppo_lever_ablation \\
        --seeds 0,1,2 --parallel 1 --only 0-8,12-17
    python -m jaxrl_llm.report runs/ppo_lever_ablation "table's batch=runs/from_sft/ppo" \\
        --out docs/reports/ppo_lever_ablation

The trials run seed fastest: 0-2 the best setting, 3-5 the rate that fell, 6-8 no whitening,
9-11 the table's batch (skipped by `--only`: the methods table's PPO is that arm), 12-14 a
frozen reference, 15-17 no value pretraining.

Every arm runs the config's 30 steps, so the arms differ in more than the lever's loss: the
large batch samples 1,920 completions (the arm without it the methods table's 960), and value
pretraining samples its batches before step 1 for the critic alone.
"""

import os

from jaxrl_llm.config_files import load_module

# The setting the ablation starts from, the config's (chosen on the selection side by the probes).
BEST_PPO = load_module(
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "configs", "from_sft_smollm2.py")
).BEST_PPO

# Each lever turned off. "large batch" off is the methods table's PPO (from_sft_smollm2.py:ppo
# as it is); every lever off but whitening (the library's default) is the setting that fell.
LEVERS_OFF = {
    "lower rate": {"optimizer.learning_rate": 1e-5},
    "whitening": {"loss.whiten_advantages": False},
    "large batch": {"rollout.num_prompts": 8, "train.grad_accumulation": 1},
    "moving reference": {"reference.ema_decay": 0.0},
    "value pretraining": {"critic.pretrain_steps": 0},
}

# The tiny config of the same shape, which tests validate these trials against.
TINY_CONFIG = "experiments/configs/from_sft_tiny.py:ppo"


def sweep():
    return [dict(BEST_PPO)] + [{**BEST_PPO, **off} for off in LEVERS_OFF.values()]
