"""Multi-turn instruction following on SmolLM2-135M-Instruct: generated Multi-IF conversations
of three user turns, each adding an IFEval-style instruction; reward per turn = the fraction
of its instructions followed; GRPO with turn-level credit (a turn's return against the same
turn of the group). Sized for about 20 minutes on a 2-core CPU, evaluations included.
"""

from jaxrl_llm.config import grpo_config
from jaxrl_llm.envs.tasks.multi_if import multi_if_config


def get_config():
    c = multi_if_config(grpo_config())
    with c.unlocked():
        c.env.max_turn_tokens = 64
        c.env.max_episode_tokens = 384
        c.rollout.num_prompts = 4
        c.rollout.group_size = 4
        c.train.num_steps = 40
        c.train.num_minibatches = 2
        c.train.max_time_s = 720.0
        c.train.checkpoint_every = 5
        c.task.eval_size = 48
        c.eval.batch_size = 48
    return c
