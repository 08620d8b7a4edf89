"""GRPO: group-relative advantages with the PPO-clip surrogate and a KL penalty to a reference.

See "DeepSeekMath: Pushing the Limits of Mathematical Reasoning in Open Language Models"
(arXiv:2402.03300). For each prompt, G completions are sampled; with rewards r_1..r_G,

    A_i   = (r_i - mean(r)) / (std(r) + eps)                    (grpo advantages, unbiased std)
    loss  = agg_t[ max(-A_i r_it, -A_i clip(r_it, 1 - e_low, 1 + e_high)) ]
            + beta * agg_t[ k3(pi_theta, pi_ref)_it ] - c_H * agg_t[ H_it ]

with r_it = pi_theta(o_it | q, o_i,<t) / pi_old(o_it | q, o_i,<t). DAPO's clip-higher is
`clip_high > clip_low`; Dr. GRPO is `normalize_std=False` with "seq-mean-token-sum-norm".

This module holds the pure pieces (the batch, the loss, the batch builder); the loop that runs
rollout -> rewards -> updates lives in `jaxrl_llm.runners.sync`.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_llm import advantages as advantages_lib
from jaxrl_llm import losses
from jaxrl_llm.training import packing
from jaxrl_llm.training.logprobs import sequence_logprobs

Array = jax.Array


class GRPOBatch(NamedTuple):
    """One minibatch of the train step: M rows of T tokens.

    Unpacked (Rollout layout), row m is one sequence: prompt + completion + padding,
    left-aligned, and `positions` / `segment_ids` are None. Packed (`pack_batch`), a row holds
    several sequences, each with positions from 0 and its own segment id.

    Attributes:
      tokens: int32 [M, T].
      loss_mask: float32 [M, T], 1 at completion tokens.
      old_logp: float32 [M, T] log-probs of the behaviour policy (rollout or recomputed).
      ref_logp: float32 [M, T] log-probs of the frozen reference (zeros when beta is 0).
      advantages: float32 [M] per-sequence advantages broadcast over tokens, or [M, T] per token
        (packed).
      positions: int32 [M, T] or None (0..T-1 in every row).
      segment_ids: int32 [M, T] or None (one sequence per row).
    """

    tokens: Array
    loss_mask: Array
    old_logp: Array
    ref_logp: Array
    advantages: Array
    positions: Array | None = None
    segment_ids: Array | None = None


@dataclasses.dataclass(frozen=True)
class GRPOLossConfig:
    """Hyper-parameters of `grpo_loss` (hashable: it is closed over by the jitted step).

    Attributes:
      clip_low, clip_high: PPO clip range [1 - clip_low, 1 + clip_high] (DAPO: 0.2, 0.28).
      kl_beta: weight of the KL penalty to the reference; 0 skips the reference entirely.
      kl_estimator: "k1", "k2", "k3" (DeepSeekMath), or straight-through "k1+", "k3+".
      entropy_coef: weight of the entropy bonus (0: reported, not optimised).
      agg: loss aggregation mode (see `jaxrl_llm.losses.aggregate`).
      norm_len: the constant of "seq-mean-token-sum-norm" (Dr. GRPO), e.g. max_new_tokens.
      temperature: the rollout temperature; the trainer's log-probs use the same.
      logprob_implementation: `kernels.logprobs` backend, None for the device default.
      remat: gradient checkpointing per layer (memory for a third more compute).
    """

    clip_low: float = 0.2
    clip_high: float = 0.2
    kl_beta: float = 0.0
    kl_estimator: str = "k3"
    entropy_coef: float = 0.0
    agg: str = "token-mean"
    norm_len: int | None = None
    temperature: float = 1.0
    logprob_implementation: str | None = None
    remat: bool = True


def grpo_loss(model, batch: GRPOBatch, *, config: GRPOLossConfig) -> tuple[Array, dict[str, Array]]:
    """The GRPO objective of one minibatch (see the module docstring for the formula).

    Args:
      model: the policy (`Transformer`), merged inside the jitted step.
      batch: a `GRPOBatch`.
      config: a `GRPOLossConfig`.

    Returns:
      (scalar loss, metrics): policy loss, KL to the reference, entropy, clip fractions and
      ratio statistics, each a scalar.
    """
    mask = batch.loss_mask
    if batch.segment_ids is not None and config.agg != "token-mean":
        raise ValueError(
            f"grpo_loss: packed batches support agg='token-mean' only, got agg={config.agg!r} "
            "(a packed row does not know its sequences' counts): set config.loss.agg="
            "'token-mean' or config.train.pack_sequences=False."
        )
    logp, entropy = sequence_logprobs(
        model,
        batch.tokens,
        temperature=config.temperature,
        return_entropy=True,
        implementation=config.logprob_implementation,
        remat=config.remat,
        positions_bt=batch.positions,
        segment_ids_bt=batch.segment_ids,
    )
    pg_loss, metrics = losses.ppo_clip(
        logp,
        batch.old_logp,
        batch.advantages,
        mask,
        clip_low=config.clip_low,
        clip_high=config.clip_high,
        agg=config.agg,
        norm_len=config.norm_len,
    )
    loss = pg_loss
    metrics = dict(metrics, pg_loss=pg_loss)
    if config.kl_beta > 0:
        kl_bt = losses.kl(
            logp, jax.lax.stop_gradient(batch.ref_logp), estimator=config.kl_estimator
        )
        kl_value = losses.aggregate(kl_bt, mask, mode=config.agg, norm_len=config.norm_len)
        loss = loss + config.kl_beta * kl_value
        metrics["kl_ref"] = losses.masked_mean(kl_bt, mask)
    entropy_mean = losses.masked_mean(entropy, mask)
    if config.entropy_coef > 0:
        loss = loss - config.entropy_coef * losses.aggregate(
            entropy, mask, mode=config.agg, norm_len=config.norm_len
        )
    metrics["entropy"] = jax.lax.stop_gradient(entropy_mean)
    return loss, metrics


def group_advantages(
    rewards_b: np.ndarray, group_size: int, *, estimator: str = "grpo", normalize_std: bool = True
) -> np.ndarray:
    """Per-sequence advantages [B] of rewards [B] laid out as B / G groups of G adjacent rows.

    `estimator` is "grpo" (DeepSeekMath; `normalize_std=False` is Dr. GRPO) or "rloo"
    (leave-one-out baseline, "Buy 4 REINFORCE Samples, Get a Baseline for Free!").
    """
    rewards_b = np.asarray(rewards_b, np.float32)
    if rewards_b.shape[0] % group_size:
        raise ValueError(
            f"group_advantages: {rewards_b.shape[0]} rewards is not a multiple of {group_size=}."
        )
    rewards_bg = jnp.asarray(rewards_b.reshape(-1, group_size))
    if estimator == "grpo":
        adv = advantages_lib.grpo(rewards_bg, normalize_std=normalize_std)
    elif estimator == "rloo":
        adv = advantages_lib.rloo(rewards_bg)
    else:
        raise ValueError(f"group_advantages: estimator={estimator!r} must be 'grpo' or 'rloo'.")
    return np.asarray(adv, np.float32).reshape(-1)


def build_batch(rollout, advantages_b: np.ndarray, *, ref_logp=None, old_logp=None) -> GRPOBatch:
    """A `GRPOBatch` from a `jaxrl_llm.rollout.Rollout` and per-sequence advantages.

    The batch keeps the rollout's full width (prompt bucket + max_new_tokens) even when every
    completion ended early: a fixed shape means one compiled train step for the whole run, which
    on a CPU saves minutes of compilation for seconds of padded compute.
    `old_logp` defaults to the rollout's sampled log-probs, which equal the trainer's tempered
    log-probs when sampling applies no top-k / top-p / min-p filter (a tested invariant).
    """
    old = rollout.logprobs if old_logp is None else old_logp
    ref = jnp.zeros_like(old) if ref_logp is None else ref_logp
    return GRPOBatch(
        tokens=jnp.asarray(rollout.tokens, jnp.int32),
        loss_mask=jnp.asarray(rollout.completion_mask).astype(jnp.float32),
        old_logp=jnp.asarray(old, jnp.float32),
        ref_logp=jnp.asarray(ref, jnp.float32),
        advantages=jnp.asarray(advantages_b, jnp.float32),
    )


def pack_batch(
    batch: GRPOBatch, sequence_lengths_b, *, row_multiple: int = 1, width: int | None = None
) -> tuple[GRPOBatch, packing.PackingPlan]:
    """Packs an unpacked `GRPOBatch` [B, T] into R rows of width W (sequence packing).

    Args:
      batch: from `build_batch` (one sequence per row).
      sequence_lengths_b: int [B], real tokens of each row (prompt + completion length).
      row_multiple: R is rounded up to a multiple of this (e.g. the minibatch count times a
        small bucket, so that a run compiles the train step for few shapes).
      width: W, the packed row width; None keeps T. Wider rows waste less on each row's tail
        (attention costs grow with W, the matmuls do not); every sequence must fit in W.

    Returns:
      (the packed batch with per-token advantages, positions and segment ids; the plan).
    """
    if batch.segment_ids is not None:
        raise ValueError("pack_batch: the batch is already packed.")
    width = batch.tokens.shape[1] if width is None else width
    plan = packing.plan_packing(sequence_lengths_b, width=width, row_multiple=row_multiple)
    host = jax.device_get(batch)
    packed = GRPOBatch(
        tokens=packing.pack(host.tokens, plan),
        loss_mask=packing.pack(host.loss_mask, plan),
        old_logp=packing.pack(host.old_logp, plan),
        ref_logp=packing.pack(host.ref_logp, plan),
        advantages=packing.pack(host.advantages, plan),
        positions=plan.positions,
        segment_ids=plan.segment_ids,
    )
    return jax.tree.map(jnp.asarray, packed), plan


def split_minibatches(batch: GRPOBatch, num_minibatches: int) -> list[GRPOBatch]:
    """Splits a batch into `num_minibatches` equal contiguous parts along the sequence axis."""
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
