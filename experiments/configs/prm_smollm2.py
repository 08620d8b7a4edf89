"""The process reward-model stage on SmolLM2-135M-Instruct (or the SFT stage's policy with
--config.model.name=runs/sft/model): 64 chain_sum prompts x 4 completions, each step prefix
continued 4 times (Math-Shepherd soft labels), then 100 updates of 8 completions.
    python -m jaxrl_llm.main --config experiments/configs/prm_smollm2.py --workdir runs/prm
Written to runs/prm/process_reward_model (the RL stage's --config.rewards.process_model)."""

from jaxrl_llm.runners.process_reward_model import prm_config


def get_config():
    config = prm_config()
    with config.unlocked():
        config.train.num_steps = 100
        config.train.checkpoint_every = 50
        config.prm.eval_every = 50
        config.optimizer.learning_rate = 1e-5
        config.optimizer.warmup_steps = 10
    return config
