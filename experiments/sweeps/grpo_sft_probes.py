"""Cheap probes of why GRPO with the main job's recipe lowers the chain_sum_steps SFT policy (one
seed each, 12 steps, held-out greedy accuracy on the test and selection sides every 4 steps).
The recipe ("stable": rate 3e-5 cosine, temperature 1, KL 0.04, an entropy bonus adapted toward
0.7 nats a token) was made for the base model; from the SFT policy, whose sampled entropy is
about 0.04 nats a token, its first seed fell from 56.5% to 23.5% by step 15 on the test side
(docs/ppo.md). Every probe is `from_sft_smollm2.py:grpo` with one of two levers moved, or both:

    python -m jaxrl_llm.launch --config experiments/configs/from_sft_smollm2.py:grpo \\
        --sweep experiments/sweeps/grpo_sft_probes.py --sweep_dir runs/grpo_sft_probes \\
        --seeds 0 --parallel 1 --set train.num_steps=12 --set eval.every=4
    python -m jaxrl_llm.report runs/grpo_sft_probes --side selection --out /tmp/grpo_probes

The levers: the rate PPO's probes chose from this start (3e-6; docs/ppo.md), and the entropy
bonus, whose weight sits at its ceiling while the policy's entropy is far below the target
(SAC's automatic temperature, arXiv:1812.05905, pushes toward a floor the SFT policy never
had), and both.
"""

from jaxrl_llm.config_files import sibling_module

# The tiny config of the same shape, which tests validate these trials against.
TINY_CONFIG = "experiments/configs/from_sft_tiny.py:grpo"

_RATE = "optimizer.learning_rate"
PPO_PROBES_RATE = {_RATE: sibling_module(__file__, "ppo_lever_ablation.py").BEST_PPO[_RATE]}
NO_ENTROPY_BONUS = {"stabilise.entropy_target": 0.0, "loss.entropy_coef": 0.0}


def sweep():
    return [PPO_PROBES_RATE, NO_ENTROPY_BONUS, {**PPO_PROBES_RATE, **NO_ENTROPY_BONUS}]
