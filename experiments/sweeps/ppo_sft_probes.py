"""Cheap probes of why PPO lowers the chain_sum_steps SFT policy (one seed each, 12 steps,
held-out greedy accuracy on the test and selection sides every 4 steps beside the sampled
accuracy of every step). Every probe is success-only PPO from the SFT policy
(experiments/configs/ppo_prm_steps_smollm2.py, the `:sft` stage trained first) at the setting
that fell before (lambda 1, rate 1e-5, temperature 0.7), with one lever moved:

    python -m jaxrl_llm.launch --config experiments/configs/ppo_prm_steps_smollm2.py \\
        --sweep experiments/sweeps/ppo_sft_probes.py --sweep_dir runs/ppo_sft_probes \\
        --seeds 0 --parallel 1 --set rewards.process_model= \\
        --set rewards.process_placement=summed --set train.num_steps=12 --set eval.every=4
    python -m jaxrl_llm.report runs/ppo_sft_probes --side selection --out /tmp/probes

Levers (Xu et al. 2404.10719; VC-PPO 2503.01491): the rollout temperature against the SFT
policy's low entropy, critic warm-up before the actor moves, advantage whitening, the KL
weight, the learning rate, the batch size, value pretraining and decoupled actor / critic
lambdas.
"""

from jaxrl_llm.config_files import sibling_module

# The tiny config of the same shape, which tests validate these trials against.
TINY_CONFIG = "experiments/configs/ppo_prm_steps_tiny.py"
# The setting the lever ablation starts from, which the last probe tries before the final runs.
BEST_PPO = sibling_module(__file__, "ppo_lever_ablation.py").BEST_PPO

# The `--set` flags above make every probe success-only (no process reward model: the summed
# placement without one is plain PPO), 12 steps, evaluated every 4.


def sweep():
    return [
        {},  # the setting that fell (docs/process_rewards.md: 62.5% -> 50.8% over 30 steps)
        {"rollout.temperature": 1.0},  # more exploration from a peaked policy
        {"critic.warmup_rl_steps": 4},  # the critic learns V before the actor moves
        {"loss.whiten_advantages": False},  # no token-mean subtraction
        {"optimizer.learning_rate": 3e-6},  # a third of the rate
        {"loss.kl_beta": 0.2},  # four times the KL weight to the SFT policy
        {"rollout.num_prompts": 16},  # twice the prompts a step
        # Added after the first probes showed the critic's explained variance near 0 for all
        # 12 steps (appended, so the earlier trials keep their names):
        {"critic.pretrain_steps": 8},  # VC-PPO's value pretraining on the SFT policy's rollouts
        {"loss.lam": 0.95, "loss.critic_lam": 1.0},  # VC-PPO's decoupled lambdas
        # Added after the rate probe held (3e-6: +4.5 on the selection side): the ablation's
        # best setting, on the selection side, before its 3-seed runs
        dict(BEST_PPO),
    ]
