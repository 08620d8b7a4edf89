"""The outcome reward-model stage on SmolLM2-135M-Instruct (or the SFT stage's policy with
--config.model.name=runs/sft/model): pairs from 384 chain_sum prompts x 8 samples scored by the
verifier (up to 4 distinct pairs a prompt), then 40 Bradley-Terry updates of 8 pairs.
    python -m jaxrl_llm.main --config experiments/configs/rm_smollm2.py --workdir runs/rm
The reward model is written to runs/rm/reward_model (the RL stage's --config.rewards.model)."""

from jaxrl_llm.stages.reward_model import rm_config


def get_config():
    config = rm_config()
    with config.unlocked():
        config.train.num_steps = 40  # about 1.2 epochs: more overfit (80 steps: 60.9%, see docs)
        config.train.checkpoint_every = 20
        config.rm.num_prompts = 384
        config.rm.group_size = 8
        config.rm.pairs_per_prompt = 4
        config.rm.max_new_tokens = 32  # the RL stage's rollout length
        config.rm.batch_size = 8
        config.rm.max_length = 256
        config.rm.eval_every = 10
        config.optimizer.learning_rate = 1e-5
        config.optimizer.warmup_steps = 10
    return config
