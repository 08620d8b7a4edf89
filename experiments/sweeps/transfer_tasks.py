"""The default recipe on other tasks, nothing changed but the task (the transfer table).

Run with three seeds each, one process at a time on a 2-core CPU (30-40 minutes a run there),
resuming where it stopped when the same command runs again:

  python -m jaxrl_llm.launch --config experiments/configs/grpo_smollm2.py \
      --sweep experiments/sweeps/transfer_tasks.py --seeds 0,1,2 --set eval.every=5 \
      --set train.checkpoint_every=10 --set train.keep_checkpoints=1 \
      --sweep_dir runs/seeds/transfer_floor --parallel 1 --only 3-17
  python -m jaxrl_llm.report runs/seeds/stabilisers runs/seeds/transfer_floor \
      --out docs/reports/transfer_floor

With the main job's "stable" recipe (jaxrl_llm.recipes) chain_sum's and gcd's three
seeds are the stabiliser sweep's own runs of it (trials 042-047 of
experiments/sweeps/stabilisers.py, the same config), hence `--only 3-17` and the report over
both directories (it groups runs by their config values). The first table was run
with the main job before that recipe: `--config experiments/configs/grpo_smollm2.py:plain`,
`--sweep_dir runs/seeds/transfer`, with runs/seeds/main_job as its chain_sum row
(docs/reports/transfer). gcd, lcm, products and basic_arithmetic are the tasks the first recipe
was checked on; letter_counting and simple_equations no recipe was tuned on.
"""

from jaxrl_llm.sweeps import axis


def sweep():
    return axis(
        "task.name",
        ["gcd", "products", "basic_arithmetic", "lcm", "letter_counting", "simple_equations"],
    )
