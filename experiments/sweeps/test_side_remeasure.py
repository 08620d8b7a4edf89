"""The re-measurement on the test side with one held-out scorer: the main job (chain_sum), the
five other tasks of the transfer table with the same recipe, and the previous default ("plain")
on chain_sum, 3 seeds each (21 runs, one process at a time on a 2-core CPU, 10-40 min a run).

Every run of the earlier tables read one held-out side that also chose the recipe, each with its
own answer rule; these runs split every task three ways by problem (train / selection / test),
score every recipe with `eval.scorer="stated"`, and evaluate both sides, so the report's tables
(test side) are apart from what chose the recipe (selection side):

    python -m jaxrl_llm.launch --config experiments/configs/grpo_smollm2.py \\
        --sweep experiments/sweeps/test_side_remeasure.py --seeds 0,1,2 --set eval.every=5 \\
        --set train.checkpoint_every=10 --set train.keep_checkpoints=1 \\
        --sweep_dir runs/test_side/stable --parallel 1
    python -m jaxrl_llm.launch --config experiments/configs/grpo_smollm2.py:plain --seeds 0,1,2 \\
        --set eval.every=5 --set train.checkpoint_every=10 --set train.keep_checkpoints=1 \\
        --sweep_dir runs/test_side/plain --parallel 1
    python -m jaxrl_llm.report runs/test_side/stable --keep_records docs/reports/runs/test_side \\
        --out /tmp/test_side_transfer
    python -m jaxrl_llm.report docs/reports/runs/test_side/stable --out docs/reports/test_side_transfer
    python -m jaxrl_llm.report plain=runs/test_side/plain stable=runs/test_side/stable/000_name=chain_sum_seed=0,... \\
        --against plain --out docs/reports/test_side_stable_vs_plain
"""

from jaxrl_llm.sweeps import axis


def sweep():
    return axis(
        "task.name",
        ["chain_sum", "gcd", "products", "basic_arithmetic", "letter_counting", "simple_equations"],
    )
