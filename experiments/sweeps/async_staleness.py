"""Staleness against off-policy corrections on the README's main job (docs/async.md).

Each trial is the main job (GRPO, SmolLM2-135M-Instruct, chain_sum, 30 steps) run by the
asynchronous runner in deterministic mode: batch s is generated with weights max(0, s - k)
learner versions old, whatever the threads' timing, so held-out accuracy at equal learner steps
compares the corrections alone. Staleness 0 is the synchronous runner (same numbers, tested).
Trials are ordered by what the table needs first; one at a time, about 10 minutes each on a
2-core CPU:
  python -m jaxrl_llm.launch --config experiments/configs/grpo_smollm2.py:plain \
      --sweep experiments/sweeps/async_staleness.py --sweep_dir runs/async_staleness
`:plain`: the main job without the "stable" recipe it took on 2026-11-28 (jaxrl_llm.recipes);
these runs predate it.
"""

from jaxrl_llm.sweeps import axis, concat, fixed, product

ASYNC = {
    "async_rl.enabled": True,
    "async_rl.deterministic": True,
    # One checkpoint at the end: deterministic checkpoints also hold k older weight versions.
    "train.checkpoint_every": 30,
}
CORRECTIONS = ["none", "decoupled_ppo", "aipo", "tis"]


def sweep():
    return concat(
        product(
            fixed(ASYNC),
            axis("async_rl.max_staleness", [4]),
            axis("off_policy.correction", CORRECTIONS),
        ),
        product(
            fixed(ASYNC),
            axis("async_rl.max_staleness", [2, 1]),
            axis("off_policy.correction", CORRECTIONS),
        ),
    )
