"""Next-token sampling: greedy, temperature, top-k, top-p (nucleus) and min-p, with per-row keys.

One function, `sample_tokens`, draws one token per row and returns two log-probs of it:

  logprob      log q(token), where q is the distribution that was actually sampled: the logits
               divided by the temperature, then restricted by top-k, then top-p, then min-p, and
               renormalised over the tokens left. A greedy row (temperature 0) samples a point
               mass, so its `logprob` is exactly 0.
  raw_logprob  log pi(token) under the untempered, unfiltered policy: `log_softmax(logits)`,
               temperature 1. This is what a trainer's forward computes, so
               `raw_logprob - logprob` is the log importance ratio between policy and sampler.

The filters compose in the order of Hugging Face's logits warpers (temperature -> top-k -> top-p ->
min-p) and every one is defined by a threshold, so ties at the boundary are all kept:

  top-k   keep logit >= the k-th largest logit.
  top-p   sort the (temperature-scaled, top-k-filtered, renormalised) probabilities in decreasing
          order; keep the smallest prefix whose mass reaches `top_p` ("The Curious Case of Neural
          Text Degeneration", arXiv:1904.09751), plus every token tied with its last member.
          The most likely token is always kept; `top_p >= 1` keeps everything.
  min-p   keep probability >= min_p * (largest probability), i.e. logit >= max logit + log(min_p)
          ("Turning Up the Heat: Min-p Sampling", arXiv:2407.01082).

Per-row randomness: row b at decode step j uses `jax.random.fold_in(key_b, j)`, and each row's
Gumbel noise is drawn from its own key, so a row's sample never depends on its batch neighbours or
on the batch size. `sequence_keys` makes `key_b = fold_in(key(seed), b)`. Draws are exact
two-level Gumbel-max (`categorical`), which needs ~450 Gumbel numbers per row instead of V.

`filter_logits` and `sampling_logprobs` are the same maths applied to whole sequences, for a
trainer or a test that needs the sampler's log-probs of given tokens (teacher forcing).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp
import numpy as np

Array = jax.Array

# Where a filter removes a token its logit becomes -inf, so softmax gives it probability exactly 0
# and the Gumbel-max draw (`categorical`) can never pick it.
_NEG_INF = -jnp.inf
# Vocabulary block of the two-level Gumbel-max draw (`categorical`).
_BLOCK = 256
# top-k uses XLA's TopK up to this k (its cost grows with k), an exact bisection above it.
_TOP_K_DIRECT = 256
# top-p first looks for the nucleus among this many most likely tokens.
_TOP_P_CANDIDATES = 64


class SampleOutput(NamedTuple):
    """One sampled token per row.

    Attributes:
      tokens: int32 [B].
      logprobs: float32 [B], log-prob under the sampled (tempered, filtered) distribution; 0 for
        greedy rows.
      raw_logprobs: float32 [B], log-prob under `log_softmax(logits)` (temperature 1, no filter).
    """

    tokens: Array
    logprobs: Array
    raw_logprobs: Array


def sequence_keys(seed: int | Sequence[int], batch_size: int, *, offset: int = 0) -> Array:
    """Per-row PRNG keys [B]: `fold_in(key(seed), offset + b)`, or `key(seed[b])` for a per-row
    seed list.

    Args:
      seed: one integer for the batch, or one integer per row.
      batch_size: B.
      offset: the index of row 0 in a larger batch (a chunk of it keeps the keys the whole
        batch would give its rows).

    Returns:
      A typed key array of shape [B].
    """
    if isinstance(seed, (int, np.integer)):
        base = jax.random.key(int(seed))
        rows = offset + jnp.arange(batch_size)
        return jax.vmap(lambda b: jax.random.fold_in(base, b))(rows)
    seeds = np.asarray(seed, dtype=np.int64)
    if seeds.shape != (batch_size,):
        raise ValueError(f"seed has {seeds.size} entries but the batch has {batch_size} rows.")
    return jax.vmap(jax.random.key)(jnp.asarray(seeds, dtype=jnp.uint32))


def _ordered_keys(x: Array) -> Array:
    """uint32 keys with the order of float32 `x` (-inf < ... < +inf), for exact bisection."""
    u = jax.lax.bitcast_convert_type(x.astype(jnp.float32), jnp.uint32)
    return jnp.where(u >> 31 == 1, ~u, u | jnp.uint32(0x80000000))


def _largest_threshold(keys_bv: Array, ok) -> Array:
    """Per row, the largest t with `ok(keys_bv >= t)` True, by bisection over uint32 keys.

    `ok` maps a [B, V] bool mask to [B] bool; it must hold for the full mask (t = the row's
    smallest key) and be monotone (True for every smaller t once True). 32 halvings of a range
    below 2^32 end exactly on a key of the row: the threshold is one of its values, no rounding.
    """
    lo = jnp.min(keys_bv, axis=-1)
    hi = jnp.max(keys_bv, axis=-1) + 1  # the largest key is +inf's 0xFF800000: no overflow

    def halve(_, bounds):
        lo, hi = bounds
        mid = lo + (hi - lo) // 2
        good = ok(keys_bv >= mid[:, None])
        return jnp.where(good, mid, lo), jnp.where(good, hi, mid)

    lo, _ = jax.lax.fori_loop(0, 32, halve, (lo, hi))
    return lo


def _sorted_top(x: Array, k: int) -> Array:
    """The k largest values per row, decreasing, through XLA's TopK (5 ms for [32, 49152], k=50).

    The optimization barrier keeps XLA from rewriting "TopK, then slice it" into a full sort of
    the vocabulary, which takes over 0.5 s on this CPU.
    """
    values, _ = jax.lax.optimization_barrier(jax.lax.top_k(x, k))
    return values


def _top_k_mask(x: Array, top_k: int) -> tuple[Array, Array | None]:
    """(keep mask, the k sorted largest values or None): logit >= the k-th largest logit."""
    if top_k <= _TOP_K_DIRECT:
        values = _sorted_top(x, top_k)
        return x >= values[:, -1:], values
    keys = _ordered_keys(x)
    cut = _largest_threshold(keys, lambda m: m.sum(axis=-1) >= top_k)
    return keys >= cut[:, None], None


def _top_p_mask(x: Array, top_p_b: Array, sorted_top: Array | None) -> Array:
    """Keep mask of the nucleus: logit >= the smallest logit of the minimal prefix of mass top_p.

    The prefix comes from the sorted largest logits (`sorted_top`, or `lax.top_k` of
    _TOP_P_CANDIDATES) when their mass reaches top_p in every row; otherwise the cut is found
    exactly by bisection over the whole vocabulary (flat distributions), never by a full sort.
    """
    log_z = jax.nn.logsumexp(x, axis=-1, keepdims=True)
    if sorted_top is None:
        sorted_top = _sorted_top(x, min(_TOP_P_CANDIDATES, x.shape[-1]))
    probs = jnp.exp(sorted_top - log_z)
    mass = jnp.cumsum(probs, axis=-1)
    n_keep = jnp.maximum(jnp.sum(mass - probs < top_p_b[:, None], axis=-1), 1)
    fast_cut = jnp.take_along_axis(sorted_top, n_keep[:, None] - 1, axis=-1)[:, 0]
    # The nucleus lies inside the candidates (rows with top_p >= 1 keep everything anyway).
    covered = (mass[:, -1] >= top_p_b) | (top_p_b >= 1.0)
    keys = _ordered_keys(x)
    fast_key = _ordered_keys(fast_cut)

    def exact_cut():
        p_bv = jnp.exp(x - log_z)
        cut = _largest_threshold(
            keys, lambda m: jnp.sum(jnp.where(m, p_bv, 0.0), axis=-1) >= top_p_b
        )
        return jnp.where(covered, fast_key, cut)

    cut = jax.lax.cond(jnp.all(covered), lambda: fast_key, exact_cut)
    # Summing thousands of float32 probabilities can reach 1 before the tail: top_p >= 1
    # must keep the whole support, so it bypasses the sums.
    return (keys >= cut[:, None]) | (top_p_b[:, None] >= 1.0)


def filter_logits(
    logits_bv: Array,
    *,
    top_k: int | None = None,
    top_p_b: Array | None = None,
    min_p_b: Array | None = None,
) -> Array:
    """Sets the logits of tokens outside the top-k / top-p / min-p support to -inf.

    No full-vocabulary sort (XLA's CPU sort of [32, 49152] takes over a second): top-k uses
    `lax.top_k` (k <= 256) or an exact bisection; top-p the sorted top candidates, falling back
    to an exact bisection when they hold less than `top_p` of the mass.

    Args:
      logits_bv: float32 [B, V], already divided by the temperature.
      top_k: keep the k largest logits (and ties with the k-th); None or >= V disables. Static.
      top_p_b: float32 [B] nucleus mass per row; None disables (so does a row value >= 1).
      min_p_b: float32 [B] min-p ratio per row; None disables (so does a row value <= 0).

    Returns:
      float32 [B, V]: `logits_bv` where kept, -inf elsewhere. The largest logit is always kept.
    """
    chex.assert_rank(logits_bv, 2)
    x = logits_bv.astype(jnp.float32)
    vocab = x.shape[-1]
    sorted_top = None
    if top_k is not None and 0 < top_k < vocab:
        keep, sorted_top = _top_k_mask(x, top_k)
        x = jnp.where(keep, x, _NEG_INF)
    if top_p_b is not None:
        chex.assert_shape(top_p_b, (x.shape[0],))
        x = jnp.where(_top_p_mask(x, top_p_b, sorted_top), x, _NEG_INF)
    if min_p_b is not None:
        chex.assert_shape(min_p_b, (x.shape[0],))
        # p_i >= min_p * p_max  <=>  logit_i >= logit_max + log(min_p); log(0) = -inf keeps all.
        floor = jnp.max(x, axis=-1, keepdims=True) + jnp.log(min_p_b[:, None])
        x = jnp.where(x >= floor, x, _NEG_INF)
    return x


def categorical(keys_b: Array, logits_bv: Array) -> tuple[Array, Array]:
    """Exact draws from softmax(logits) per row by two-level Gumbel-max; also returns log Z.

    The vocabulary is cut into blocks of 256: a block is drawn with probability proportional to
    its mass (Gumbel-max over the blocks' log-sum-exps), then a token inside it (Gumbel-max over
    its logits). P(token) = P(block) P(token | block) = softmax(logits)[token], as in one
    Gumbel-max over V, but with 256 + V/256 Gumbel draws per row instead of V: threefry bits
    for [32, 49152] noise cost more than the rest of a 135M-parameter decode step on a 2-core CPU.
    A token with logit -inf (filtered) is never drawn. Row b uses only `keys_b[b]`.

    Args:
      keys_b: [B] typed keys.
      logits_bv: float32 [B, V], -inf allowed (at least one finite per row).

    Returns:
      (int32 tokens [B], float32 log-normaliser logsumexp(logits) [B]).
    """
    b, v = logits_bv.shape
    n_blocks = -(-v // _BLOCK)
    x = jnp.pad(logits_bv, ((0, 0), (0, n_blocks * _BLOCK - v)), constant_values=_NEG_INF)
    x_bnk = x.reshape(b, n_blocks, _BLOCK)
    block_lse_bn = jax.nn.logsumexp(x_bnk, axis=-1)
    outer_keys, inner_keys = step_keys(keys_b, 0), step_keys(keys_b, 1)
    gumbel = lambda keys, n: jax.vmap(lambda k: jax.random.gumbel(k, (n,), jnp.float32))(keys)
    block_b = jnp.argmax(block_lse_bn + gumbel(outer_keys, n_blocks), axis=-1)
    inner_bk = jnp.take_along_axis(x_bnk, block_b[:, None, None], axis=1)[:, 0]
    within_b = jnp.argmax(inner_bk + gumbel(inner_keys, _BLOCK), axis=-1)
    tokens_b = (block_b * _BLOCK + within_b).astype(jnp.int32)
    return tokens_b, jax.nn.logsumexp(block_lse_bn, axis=-1)


def _safe_temperature(temperature_b: Array) -> Array:
    # Greedy rows (temperature <= 0) divide by 1 instead; their draw is replaced by the argmax.
    return jnp.where(temperature_b > 0, temperature_b, 1.0).astype(jnp.float32)


def sampling_logprobs(
    logits_btv: Array,
    *,
    temperature_b: Array,
    top_k: int | None = None,
    top_p_b: Array | None = None,
    min_p_b: Array | None = None,
) -> Array:
    """Log-probs [B, T, V] of the distribution `sample_tokens` draws from, at every position.

    Teacher-forced counterpart of `SampleOutput.logprobs` (for rows with temperature > 0): gather
    it at the sampled tokens to reproduce the rollout's log-probs. Filtered tokens get -inf.

    Args:
      logits_btv: [B, T, V] logits (any float dtype; upcast to float32).
      temperature_b: float32 [B], > 0.
      top_k, top_p_b, min_p_b: as in `filter_logits`.

    Returns:
      float32 [B, T, V].
    """
    chex.assert_rank(logits_btv, 3)
    b, t, v = logits_btv.shape
    scaled = logits_btv.astype(jnp.float32) / _safe_temperature(temperature_b)[:, None, None]

    def per_row(x):
        return jnp.repeat(x, t) if x is not None else None

    filtered = filter_logits(
        scaled.reshape(b * t, v),
        top_k=top_k,
        top_p_b=per_row(top_p_b),
        min_p_b=per_row(min_p_b),
    )
    return jax.nn.log_softmax(filtered, axis=-1).reshape(b, t, v)


def sample_tokens(
    keys_b: Array,
    logits_bv: Array,
    *,
    temperature_b: Array,
    top_k: int | None = None,
    top_p_b: Array | None = None,
    min_p_b: Array | None = None,
) -> SampleOutput:
    """Draws one token per row and returns its sampled and raw log-probs.

    Args:
      keys_b: [B] typed PRNG keys, one per row (already folded with the step).
      logits_bv: [B, V] logits (upcast to float32).
      temperature_b: float32 [B]; a row with temperature <= 0 is greedy (argmax of the raw logits).
      top_k: static int or None, see `filter_logits`.
      top_p_b: float32 [B] or None.
      min_p_b: float32 [B] or None.

    Returns:
      `SampleOutput` of [B] arrays.

    Example:
      >>> keys = sequence_keys(0, 2)
      >>> out = sample_tokens(keys, jnp.log(jnp.array([[.7, .3], [.1, .9]])),
      ...                     temperature_b=jnp.array([0., 1.]))
      >>> out.tokens[0], out.logprobs[0]   # greedy row: argmax, log 1
      (Array(0, dtype=int32), Array(0., dtype=float32))
    """
    chex.assert_rank(logits_bv, 2)
    chex.assert_shape(temperature_b, (logits_bv.shape[0],))
    logits = logits_bv.astype(jnp.float32)
    greedy_b = temperature_b <= 0
    scaled = logits / _safe_temperature(temperature_b)[:, None]
    filtered = filter_logits(scaled, top_k=top_k, top_p_b=top_p_b, min_p_b=min_p_b)
    sampled_b, _ = categorical(keys_b, filtered)
    # One reduction over the whole row (not categorical's two-level one): its float32 rounding
    # does not depend on the batch size on XLA:CPU, so compacting rows keeps log-probs bitwise.
    log_z_b = jax.nn.logsumexp(filtered, axis=-1)
    tokens_b = jnp.where(greedy_b, jnp.argmax(logits, axis=-1).astype(jnp.int32), sampled_b)
    take = lambda a: jnp.take_along_axis(a, tokens_b[:, None], axis=-1)[:, 0]
    logprobs_b = jnp.where(greedy_b, 0.0, take(filtered) - log_z_b)
    raw_logprobs_b = take(logits) - jax.nn.logsumexp(logits, axis=-1)
    return SampleOutput(tokens_b, logprobs_b, raw_logprobs_b)


def step_keys(keys_b: Array, step: Array | int) -> Array:
    """The keys of decode step `step` (a scalar or one per row): `fold_in(key_b, step_b)`."""
    steps_b = jnp.broadcast_to(jnp.asarray(step, jnp.uint32), keys_b.shape)
    return jax.vmap(jax.random.fold_in)(keys_b, steps_b)
