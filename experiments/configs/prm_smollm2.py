"""The process reward-model stage on SmolLM2-135M-Instruct (or the SFT stage's policy with
--config.model.name=runs/sft/model): 64 chain_sum prompts x 4 completions of at most 32 tokens
(the RL stage's rollout length), each step prefix continued 4 times (Math-Shepherd soft labels),
then 40 updates of 8 completions (about 1.5 epochs).
    python -m jaxrl_llm.main --config experiments/configs/prm_smollm2.py --workdir runs/prm
Written to runs/prm/process_reward_model (the RL stage's --config.rewards.process_model)."""

from jaxrl_llm.stages.process_reward_model import prm_config


def get_config():
    config = prm_config()
    with config.unlocked():
        config.prm.max_new_tokens = 32
        config.train.num_steps = 40
        config.train.checkpoint_every = 20
        config.prm.eval_every = 10
        config.optimizer.learning_rate = 1e-5
        config.optimizer.warmup_steps = 5
    return config
