"""Gao et al.'s four-way comparison, small: PPO on chain_sum_steps with the
success reward only; + the raw process reward; + Clip (eta 0.5); + Delta. The three PRM arms
place the refined step rewards densely (each on its step's last token, the success reward on the
final token, through the critic's GAE: experiments/configs/ppo_prm_steps_smollm2.py), against
one process reward model (that config's :prm stage, trained first). Three seeds each, one run
at a time on a 2-core CPU; a rerun of the command resumes where it stopped:

    python -m jaxrl_llm.launch --config experiments/configs/ppo_prm_steps_smollm2.py \\
        --sweep experiments/sweeps/prm_refinement.py --sweep_dir runs/prm_refinement \\
        --seeds 0,1,2 --parallel 1
    python -m jaxrl_llm.report runs/prm_refinement --metric reward/process_steps \\
        --metric completion/length --out docs/reports/prm_refinement
"""

# The success-only arm drops the process model (dense placement needs one, so it is "summed":
# with no process reward the two placements are the same run).
SUCCESS_ONLY = {"rewards.process_model": "", "rewards.process_placement": "summed"}


def sweep():
    return [
        SUCCESS_ONLY,
        {"rewards.process_refinement": "none"},
        {"rewards.process_refinement": "clip", "rewards.process_eta": 0.5},
        {"rewards.process_refinement": "delta"},
    ]
