"""GRPO on Llama-3.1-8B at pod scale: the workload `python -m jaxrl_llm.plan` sizes (docs/scale.md).

64 prompts x 16 completions per step, 1,024 prompt + 4,096 response tokens, bfloat16 compute
with float32 master weights and Adam moments (mixed precision), 16 optimizer updates of 64 sequences per step, full remat. The model is the
published architecture
(`jaxrl_llm.models.architectures`), shapes only: plan it on any topology without weights, e.g.

    python -m jaxrl_llm.plan --config experiments/configs/grpo_llama8b_pod.py --topology v5e-256

`--config.model.name=llama-3.1-70b` (or qwen2.5-7b, gemma-3-27b, llama-3.2-1b) plans another.
"""

from jaxrl_llm.config import grpo_config


def pod_shapes(config) -> None:
    """The pod step's shapes and precision, shared with ppo_llama8b_pod.py."""
    config.model.name = "llama-3.1-8b"
    # bfloat16 compute, float32 master weights and optimizer state: at 1e-6 an Adam update is
    # far below a bfloat16 weight's rounding step (jaxrl_llm.models.precision).
    config.model.dtype = "bfloat16"
    config.model.param_dtype = "float32"
    config.rollout.num_prompts = 64
    config.rollout.group_size = 16
    config.rollout.min_prompt_bucket = 1024
    config.rollout.max_new_tokens = 4096
    config.rollout.temperature = 1.0
    config.train.num_minibatches = 16
    config.train.remat = "full"
    config.optimizer.learning_rate = 1e-6


def get_config():
    config = grpo_config()
    pod_shapes(config)
    return config
