"""Tool use on SmolLM2-135M-Instruct: reasoning-gym products of 3- and 4-digit factors with a
calculator tool, GRPO on whole episodes (call, read the result, answer).

The 135M model writes no well-formed tool call on its own (held-out rate 0% before training),
so the run first fine-tunes it on scripted demonstrations (SFT warm-up, `config.env.warmup_*`),
then trains with GRPO. The warm-up is kept short on purpose: measured here, 3 SFT steps at 5e-5
already give 100% held-out accuracy (the task is copying the product into a call and its result
into the answer), which would leave GRPO nothing to learn; 2 steps at 3e-5 gave 80%.
Sized for about 20 minutes on a 2-core CPU, evaluations included.
`--config.env.warmup_steps=0` is the run without warm-up (its reward is always 0).
"""

from jaxrl_llm.config import grpo_config
from jaxrl_llm.envs.tasks.calculator import calculator_config


def get_config():
    c = calculator_config(grpo_config())
    with c.unlocked():
        c.env.max_turns = 3
        c.env.max_turn_tokens = 48
        c.env.max_episode_tokens = 256
        c.env.warmup_demos = 256
        c.env.warmup_steps = 2
        c.env.warmup_batch_size = 8
        c.env.warmup_learning_rate = 3e-5
        c.rollout.num_prompts = 4
        c.rollout.group_size = 4
        c.train.num_steps = 40
        c.train.num_minibatches = 2
        c.train.max_time_s = 720.0
        c.train.checkpoint_every = 5
        c.task.eval_size = 50
        c.eval.batch_size = 50
    return c
