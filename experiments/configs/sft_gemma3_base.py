"""A short SFT warm-up for Gemma 3 270M base before GRPO: basic_arithmetic's
training-side questions with their gold answers rendered as "The answer is N." after the
"Question: ... Answer:" prompt (jaxrl_llm/stages/sft.py), so that the base model learns to state
one answer and stop, which GRPO from the base model alone did not teach it (docs/gemma3.md).

    python -m jaxrl_llm.main --config experiments/configs/sft_gemma3_base.py \\
        --workdir runs/gemma3_sft
    python -m jaxrl_llm.launch --config experiments/configs/grpo_gemma3_base.py --seeds 0,1,2 \\
        --set model.name=runs/gemma3_sft/model --set eval.every=5 \\
        --sweep_dir runs/seeds/gemma3_sft_grpo --parallel 1

30 updates of 16 records (480 questions of the 10,000-question training pool) at 2e-5 with 5
warm-up steps; held-out greedy accuracy before and after on the same 200 held-out questions as
the GRPO runs' evaluation.
"""

from jaxrl_llm.stages.sft import sft_config


def get_config():
    config = sft_config()
    with config.unlocked():
        config.model.name = "gemma3-270m"
        config.task.name = "basic_arithmetic"
        config.train.num_steps = 30
        config.train.checkpoint_every = 30
        config.sft.batch_size = 16
        config.sft.max_length = 128
        config.sft.eval_records = 64
        config.optimizer.learning_rate = 2e-5
        config.optimizer.warmup_steps = 5
    return config
