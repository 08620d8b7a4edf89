"""The SFT stage on SmolLM2-135M-Instruct: chain_sum questions with their gold answers rendered
as "The answer is N." (see jaxrl_llm/stages/sft.py). About 10 minutes on 2 CPU cores:
    python -m jaxrl_llm.main --config experiments/configs/sft_smollm2.py --workdir runs/sft
The fine-tuned policy is written to runs/sft/model (a Hugging Face directory)."""

from jaxrl_llm.stages.sft import sft_config


def get_config():
    config = sft_config()
    with config.unlocked():
        config.train.num_steps = 60
        config.train.checkpoint_every = 20
        config.sft.batch_size = 16
        config.sft.max_length = 192
        config.sft.eval_records = 64
        config.sft.eval_every = 20
        config.optimizer.learning_rate = 1e-5
        config.optimizer.warmup_steps = 5
    return config
