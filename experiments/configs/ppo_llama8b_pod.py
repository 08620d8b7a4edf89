"""PPO on Llama-3.1-8B at pod scale: a critic, a reference and a KL penalty, the workload
`python -m jaxrl_llm.plan` sizes beside the GRPO one (docs/scale.md).

The GRPO pod config's step (64 prompts x 16 completions, 1,024 prompt + 4,096 response tokens,
bfloat16 compute with float32 master weights and Adam moments, 16 optimizer updates of 64
sequences, full remat) plus what PPO adds: a critic of the policy's size (its own float32
master weights and Adam state, a value forward over the step's rows and a train step per
minibatch) and the reference's frozen log-probs for the KL penalty. Those forwards run
`rollout.forward_batch` rows at a time (`jaxrl_llm.roles.forwards`); the planner picks it:

    python -m jaxrl_llm.plan --config experiments/configs/ppo_llama8b_pod.py --topology v5e-64
"""

from jaxrl_llm.config import config_for
from jaxrl_llm.config_files import sibling_module


def get_config():
    config = config_for("ppo")
    sibling_module(__file__, "grpo_llama8b_pod.py").pod_shapes(config)
    # The critic learns faster than the policy (OpenRLHF's 8B PPO: 5e-7 actor, 9e-6 critic).
    config.critic.learning_rate = 5e-6
    # The KL to the reference folded into the reward (PPO's default coefficient).
    config.loss.kl_beta = 0.05
    return config
