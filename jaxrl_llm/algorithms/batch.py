"""The train batch every policy-gradient algorithm builds, and the ways to cut it.

A `PolicyBatch` is what the actor's (and the critic's) train step consume. Algorithms fill the
fields they use: GRPO per-sequence advantages [M]; PPO per-token advantages, returns and the
critic's rollout values [M, T]. `pack_batch` and `split_minibatches` work on any such batch.

A step's rows make `config.train.num_minibatches` optimizer updates; each update may
accumulate the gradients of `config.train.grad_accumulation` micro-batches
(`micro_batch_weights`, `Learner.update`), so a large batch fits in memory with the update of
the whole minibatch.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_llm.losses.aggregation import aggregate_count
from jaxrl_llm.training import packing

Array = jax.Array


class PolicyBatch(NamedTuple):
    """One (mini)batch of the train step: M rows of T tokens.

    Unpacked (the `Rollout` layout), row m is one sequence: prompt + completion + padding,
    left-aligned, and `positions` / `segment_ids` are None. Packed (`pack_batch`), a row holds
    several sequences, each with positions from 0 and its own segment id.

    Attributes:
      tokens: int32 [M, T].
      loss_mask: float32 [M, T], 1 at completion tokens.
      old_logp: float32 [M, T] log-probs of the behaviour policy (rollout or recomputed).
      ref_logp: float32 [M, T] log-probs of the frozen reference (zeros without a reference).
      advantages: float32 [M] per-sequence advantages broadcast over tokens, or [M, T] per token.
      returns: float32 [M, T] value targets (critic algorithms), else None.
      old_values: float32 [M, T] the critic's values at rollout time, else None.
      positions: int32 [M, T] or None (0..T-1 in every row).
      segment_ids: int32 [M, T] or None (one sequence per row).
      rollout_logp: float32 [M, T] log-probs the rollout reported (the behaviour policy), set
        by the runners; `old_logp` then holds the proximal policy's when the off-policy
        correction needs it (`jaxrl_llm.algorithms.off_policy`).
      entropy_coef: float32 [M] (or [M, T] packed) the entropy bonus's weight when it adapts
        during the run (`config.stabilise.entropy_target`); None: the loss config's constant.
      token_noise: float32 [M, T] uniform [0, 1) draws, new every step, from which Clip-Cov
        picks the tokens whose gradient it drops (`config.stabilise.clip_cov_fraction`);
        None without it.
      clip_cov_fraction: float32 [M] (or [M, T] packed) Clip-Cov's share when it adapts during
        the run (`config.stabilise.clip_cov_target_ratio`), the same in every row; None: the
        loss config's constant.
    """

    tokens: Array
    loss_mask: Array
    old_logp: Array
    ref_logp: Array
    advantages: Array
    returns: Array | None = None
    old_values: Array | None = None
    positions: Array | None = None
    segment_ids: Array | None = None
    rollout_logp: Array | None = None
    entropy_coef: Array | None = None
    token_noise: Array | None = None
    clip_cov_fraction: Array | None = None


def build_batch(
    rollout,
    advantages,
    *,
    ref_logp=None,
    old_logp=None,
    returns=None,
    old_values=None,
) -> PolicyBatch:
    """A `PolicyBatch` from a `jaxrl_llm.rollout.Rollout` and advantages ([B] or [B, T]).

    The batch keeps the rollout's full width (prompt bucket + max_new_tokens) even when every
    completion ended early: a fixed shape means one compiled train step for the whole run, which
    on a CPU saves minutes of compilation for seconds of padded compute.
    `old_logp` defaults to the rollout's sampled log-probs, which equal the trainer's tempered
    log-probs when sampling applies no top-k / top-p / min-p filter (a tested invariant).
    """
    old = rollout.logprobs if old_logp is None else old_logp
    ref = jnp.zeros_like(jnp.asarray(old)) if ref_logp is None else ref_logp

    def f32(x):
        return None if x is None else jnp.asarray(x, jnp.float32)

    return PolicyBatch(
        tokens=jnp.asarray(rollout.tokens, jnp.int32),
        loss_mask=jnp.asarray(rollout.completion_mask).astype(jnp.float32),
        old_logp=f32(old),
        ref_logp=f32(ref),
        advantages=f32(advantages),
        returns=f32(returns),
        old_values=f32(old_values),
    )


def pack_batch(
    batch: PolicyBatch, sequence_lengths_b, *, row_multiple: int = 1, width: int | None = None
) -> tuple[PolicyBatch, packing.PackingPlan]:
    """Packs an unpacked `PolicyBatch` [B, T] into R rows of width W (sequence packing).

    Per-sequence fields ([B], e.g. GRPO's advantages) become per-token in the packed rows.

    Args:
      batch: from `build_batch` (one sequence per row).
      sequence_lengths_b: int [B], real tokens of each row (prompt + completion length).
      row_multiple: R is rounded up to a multiple of this (e.g. the minibatch count times a
        small bucket, so that a run compiles the train step for few shapes).
      width: W, the packed row width; None keeps T. Wider rows waste less on each row's tail
        (attention costs grow with W, the matmuls do not); every sequence must fit in W.

    Returns:
      (the packed batch with positions and segment ids; the plan).
    """
    if batch.segment_ids is not None:
        raise ValueError("pack_batch: the batch is already packed.")
    width = batch.tokens.shape[1] if width is None else width
    plan = packing.plan_packing(sequence_lengths_b, width=width, row_multiple=row_multiple)
    host = jax.device_get(batch)
    packed = {
        name: None if value is None else packing.pack(np.asarray(value), plan)
        for name, value in host._asdict().items()
        if name not in ("positions", "segment_ids")
    }
    packed = PolicyBatch(**packed, positions=plan.positions, segment_ids=plan.segment_ids)
    return jax.tree.map(jnp.asarray, packed), plan


def split_minibatches(batch: PolicyBatch, num_minibatches: int) -> list[PolicyBatch]:
    """Splits a batch into `num_minibatches` equal contiguous parts along the row axis."""
    m = batch.tokens.shape[0]
    if num_minibatches < 1 or m % num_minibatches:
        raise ValueError(
            f"num_minibatches={num_minibatches} must divide the {m} sequences of a step."
        )
    size = m // num_minibatches
    return [
        jax.tree.map(lambda x, i=i: x[i * size : (i + 1) * size], batch)
        for i in range(num_minibatches)
    ]


def micro_batch_weights(batch: PolicyBatch, num_micro: int, *, agg: str) -> np.ndarray:
    """float32 [K] weights of the K contiguous micro-batches of `batch` in one accumulated
    update: each one's share of the loss's denominator, so that the weighted micro-batch losses
    and gradients add up exactly to the whole batch's.

    See "DAPO: An Open-Source LLM Reinforcement Learning System at Scale" (2503.14476): a
    token-level mean divides by the tokens of the whole batch. With `aggregate_count`:

        w_k = count(mask_k; agg) / sum_j count(mask_j; agg)

    and micro-batch k's loss total_k / count_k weighs total_k / sum_j count_j: the loss of the
    whole batch, not the mean of the micro-batches' means. A batch with nothing to count gets
    equal weights (its loss is 0 either way).

    Args:
      batch: the minibatch of one update; its `loss_mask` [M, T] is what the loss aggregates.
      num_micro: K, which must divide M.
      agg: the loss's aggregation mode (`config.loss.agg`).

    Returns:
      float32 [K] weights summing to 1.

    Example:
      >>> micro_batch_weights(batch, 2, agg="token-mean")   # 3 and 1 loss tokens
      array([0.75, 0.25], dtype=float32)
    """
    counts = np.array(
        [
            float(aggregate_count(m.loss_mask, mode=agg))
            for m in split_minibatches(batch, num_micro)
        ],
        np.float64,
    )
    total = counts.sum()
    weights = counts / total if total > 0 else np.full(num_micro, 1.0 / num_micro)
    return weights.astype(np.float32)


def check_grad_accumulation(config) -> None:
    """Raises ValueError naming `config.train.grad_accumulation` and the fix: micro-batches
    that do not divide a minibatch's rows, a loss with no `config.loss.agg` to weigh them by,
    or a planned train step (it updates on the whole minibatch at once)."""
    k = config.train.get("grad_accumulation", 1)
    if k == 1:
        return
    rows = config.rollout.num_prompts * config.rollout.group_size
    minibatch = rows // config.train.num_minibatches
    if minibatch % k:
        raise ValueError(
            f"config.train.grad_accumulation={k} must divide the {minibatch} rows of a minibatch "
            f"(num_prompts * group_size / num_minibatches = {rows} / "
            f"{config.train.num_minibatches}): pick a divisor, or 1."
        )
    if "agg" not in config.get("loss", {}):
        raise ValueError(
            f"config.train.grad_accumulation={k} weighs micro-batches by the loss's token or "
            f"sequence count (config.loss.agg), which config.algorithm={config.algorithm!r} "
            "has not: set grad_accumulation=1 (or fewer rows per minibatch with "
            "config.train.num_minibatches)."
        )
    if config.train.get("planned_step"):
        raise ValueError(
            f"config.train.grad_accumulation={k} with config.train.planned_step: the planned "
            "executable updates on the whole minibatch at once; set grad_accumulation=1 or "
            "planned_step=''."
        )
