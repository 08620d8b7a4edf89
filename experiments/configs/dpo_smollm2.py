"""Offline DPO on SmolLM2-135M-Instruct and chain_sum (jaxrl_llm/stages/preference.py). Pairs:
--config.preference.pairs=<a pair JSONL> (e.g. the reward-model stage's pairs.jsonl), or by
default made from the policy's own samples (256 prompts x 8 at temperature 1, up to 4 (correct,
incorrect) pairs a prompt). Loss: --config.preference.loss_type=sigmoid|ipo|hinge|kto|simpo|orpo."""

from jaxrl_llm.stages.preference import preference_config


def get_config():
    config = preference_config("sigmoid")
    p = config.preference
    p.beta, p.batch_size, p.max_new_tokens, p.max_length = 0.1, 8, 32, 192
    config.train.num_steps, config.train.checkpoint_every = 200, 50
    config.optimizer.learning_rate = 5e-6
    config.optimizer.warmup_steps = 5
    return config
