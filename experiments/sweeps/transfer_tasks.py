"""The default recipe on other tasks, nothing changed but the task (issue 41's transfer table).

Run with three seeds each, one process at a time on a 2-core CPU (about 25 minutes a run there),
resuming where it stopped when the same command runs again:

  python -m jaxrl_llm.launch --config experiments/configs/grpo_smollm2.py \
      --sweep experiments/sweeps/transfer_tasks.py --seeds 0,1,2 --set eval.every=5 \
      --sweep_dir runs/seeds/transfer --parallel 1
  python -m jaxrl_llm.report runs/seeds/main_job runs/seeds/transfer --out docs/reports/transfer

chain_sum, the default task, is the main job (runs/seeds/main_job, the same config). gcd, lcm,
products and basic_arithmetic are the tasks the recipe was checked on; letter_counting and
simple_equations it was never tuned on.
"""

from jaxrl_llm.sweeps import axis


def sweep():
    return axis(
        "task.name",
        ["gcd", "products", "basic_arithmetic", "lcm", "letter_counting", "simple_equations"],
    )
