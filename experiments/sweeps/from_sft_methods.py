"""The table of RL methods from the chain_sum_steps SFT policy: GRPO (the main job's recipe and
the probes' setting), success-only PPO, online DPO and offline DPO, each from the same start at
one budget (experiments/configs/from_sft_smollm2.py says how the budget is matched), 3 seeds
each: 15 runs, one or two at a time on a 2-core CPU.

A launch takes one config, and each method is its own config (the argument after ":"), so the
table is five launches of these trials, one directory a method; the start
(`runs/prm_steps/sft/model`) is trained first, and a rerun of a launch resumes where it stopped:

    python -m jaxrl_llm.main --config experiments/configs/ppo_prm_steps_smollm2.py:sft \\
        --workdir runs/prm_steps/sft
    for method in grpo grpo_best ppo online_dpo dpo; do
        python -m jaxrl_llm.launch --config experiments/configs/from_sft_smollm2.py:$method \\
            --sweep experiments/sweeps/from_sft_methods.py --sweep_dir runs/from_sft/$method \\
            --parallel 1
    done
    python -m jaxrl_llm.report "GRPO best=runs/from_sft/grpo_best" PPO=runs/from_sft/ppo \\
        "online DPO=runs/from_sft/online_dpo" "offline DPO=runs/from_sft/dpo" \\
        "GRPO recipe=runs/from_sft/grpo" --against "GRPO best" --out docs/reports/from_sft_methods

The online methods log held-out greedy accuracy every 5 steps on the test side (what the report
reads) and the selection side. Offline DPO logs the same two sides, with the same problems and
scorer, before and after its updates only (its held-out pairs every 5 updates).
"""

from jaxrl_llm.sweeps import axis

# The generic sweep test validates the trials against this tiny config;
# tests/workflow/test_from_sft_configs.py against every method's.
TINY_CONFIG = "experiments/configs/from_sft_tiny.py:dpo"


def sweep():
    return axis("seed", [0, 1, 2])
