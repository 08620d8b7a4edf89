"""ReST-EM on SmolLM2-135M-Instruct and chain_sum (jaxrl_llm/stages/self_training.py): per
iteration 64 prompts x 8 samples (temperature 0.7, 32 new tokens, as the RL runs sample), then 10
SFT updates of 16 accepted records at learning rate 1e-5 (the SFT stage's)."""

from jaxrl_llm.stages.self_training import self_training_config


def get_config():
    config = self_training_config("rest_em")
    s = config.self_training
    s.iterations, s.num_prompts, s.samples_per_prompt = 10, 64, 8
    s.temperature, s.max_new_tokens = 0.7, 32
    s.steps_per_iteration, s.batch_size, s.max_length = 10, 16, 192
    s.max_per_prompt = 4  # ReST-EM keeps several accepted completions a prompt
    config.optimizer.learning_rate = 1e-5
    config.optimizer.warmup_steps = 2
    return config
