"""SFT -> reward model -> PPO on the tiny random model (a minute; for tests and notebooks):
    python -m jaxrl_llm.main --config experiments/configs/pipeline_tiny.py --workdir runs/pipe_tiny
A random policy rarely earns the verifier's reward, so its reward-model stage may find no pair;
the tests swap in a reward it earns half the time."""

from jaxrl_llm.config import config_for, make_tiny
from jaxrl_llm.stages.pipeline import pipeline_config
from jaxrl_llm.stages.reward_model import rm_config
from jaxrl_llm.stages.sft import sft_config


def get_config():
    sft, rm, rl = make_tiny(sft_config()), make_tiny(rm_config()), make_tiny(config_for("ppo"))
    with sft.unlocked():
        sft.train.num_steps = 4
        sft.sft.batch_size = 4
        sft.sft.max_length = 96
        sft.sft.eval_records = 8
        sft.eval.before = sft.eval.after = False
    with rm.unlocked():
        rm.train.num_steps = 4
        rm.rm.num_prompts = 8
        rm.rm.group_size = 4
        rm.rm.max_new_tokens = 8
        rm.rm.batch_size = 2
        rm.rm.max_length = 96
    with rl.unlocked():
        rl.train.num_steps = 2
        rl.eval.before = rl.eval.after = False
        rl.rewards.task_weight = 0.0  # the reward model alone; accuracy still reported
    return pipeline_config(sft, rm, rl)
