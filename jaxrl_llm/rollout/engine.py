"""Jitted batched generation: shared prefill, then a compacting `lax.while_loop` decode.

    rollout = generate(model, prompts, max_new_tokens=128, temperature=1.0, seed=0)

One compiled program per (model structure, padded batch, prompt bucket, static options) does the
whole rollout on device:

  1. prefill (`prefix_sharing`, see `prefix_sharing.plan_prefill`): the different prompts,
     right-padded to [U, P], run through the model once, filling cache slots 0..P-1 (slot =
     absolute position); identical prompts (a GRPO group) share one row, whose cache rows are
     then copied to each of them; with "common", the prefix all prompts share runs once first.
     A row's padding slots p_b..P-1 hold junk that attention never sees: decode step j writes
     slot p_b + j before any query at that position reads it.
  2. the first token of every row is sampled from the logits at its last prompt position.
  3. decode stages (`compaction`): a `lax.while_loop` feeds each row's previous token at position
     p_b + j - 1, samples token j and writes it at position p_b + j, until the rows still
     running fit the next stage's batch (half the size); then those rows (with their cache,
     keys, last tokens and stop windows) are gathered into it and the next loop goes on. A row
     finishes at an EOS id, a stop sequence, or its token budget; the last stage runs until
     every row has finished or `max_new_tokens` tokens were sampled. Results are written by
     row into [B, T] arrays, so compaction never changes the layout.

Parameters enter the program as arguments (never baked-in constants), so the same executable
serves every weight update, and the computation follows their sharding: params sharded by the
decode rule set run tensor-parallel. The KV cache is created inside the program; pass
`cache_shardings=CacheLayout(mesh, DECODE_RULES)` to constrain its layout.

Reproducibility: row b samples step j with `fold_in(fold_in(key(seed), b), j)` (or a per-row
seed), so a prompt's completion does not depend on the rest of the batch, nor on which slot of
which stage it decodes in. `DecodeWork` reports the prefill positions and decode row-steps
computed against the plain engine's (every row prefilled in full, the batch never shrunk).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxrl_llm.models.transformer import KV_CACHE_LOGICAL_AXES, KVCache, Transformer
from jaxrl_llm.rollout import batching
from jaxrl_llm.rollout.prefix_sharing import PREFIX_SHARING_MODES, plan_prefill
from jaxrl_llm.rollout.sampling import sample_tokens, sequence_keys, step_keys
from jaxrl_llm.rollout.types import FinishReason, Rollout

Array = jax.Array

# Incremented each time the decode program is traced (a Python side effect that runs only while
# tracing); tests read it through `trace_count()` to prove that a repeated call reuses the program.
_TRACES = {"generate": 0}


def trace_count() -> int:
    """How many times the generate program has been traced in this process (all shapes)."""
    return _TRACES["generate"]


@dataclasses.dataclass(frozen=True)
class GenerationConfig:
    """Options of a rollout. Hashable; the static ones select a compiled program.

    Attributes:
      max_new_tokens: N, the most tokens sampled per prompt (static).
      temperature: > 0 samples from softmax(logits / temperature); 0 is greedy (argmax). A float,
        or one per prompt. Not static: changing it does not recompile.
      top_k: keep the k most likely tokens; None disables (static).
      top_p: nucleus mass in (0, 1]; None disables. Float or one per prompt.
      min_p: keep tokens with probability >= min_p * max probability; None disables.
      eos_ids: token ids that end a completion (included in it). None takes the model config's
        `eos_token_id` when it has one; () disables.
      stop_sequences: token-id sequences that end a completion when it ends with one of them
        (included in it; matched within the completion only).
      pad_id: filler after each completion (and in padded prompts).
      min_prompt_bucket: prompts are right-padded to a bucket >= this (see `batching.bucket_size`).
      min_batch_bucket: the batch is padded to a bucket >= this.
      cache_dtype: dtype name of the KV cache; None uses the model dtype.
      compaction: when the live rows fit a batch half the size, gather them into it and decode
        on (stages B_pad, B_pad/2, ... >= min_compact_batch, all in one program), so finished
        rows stop costing decode work. The same tokens and log-probs as without.
      min_compact_batch: the smallest compacted batch. 8 keeps results bitwise equal to the
        uncompacted engine on XLA:CPU, whose matmuls round differently below 8 rows.
      prefix_sharing: "identical" prefills identical prompts once (a GRPO group's G rows) and
        copies their cache rows, exactly; "common" also prefills the prefix every prompt shares
        once (float32 rounding differs slightly); "none" prefills every row in full. See
        `jaxrl_llm.rollout.prefix_sharing`.
    """

    max_new_tokens: int
    temperature: float | tuple[float, ...] = 1.0
    top_k: int | None = None
    top_p: float | tuple[float, ...] | None = None
    min_p: float | tuple[float, ...] | None = None
    eos_ids: tuple[int, ...] | None = None
    stop_sequences: tuple[tuple[int, ...], ...] = ()
    pad_id: int = 0
    min_prompt_bucket: int = 16
    min_batch_bucket: int = 1
    cache_dtype: str | None = None
    compaction: bool = True
    min_compact_batch: int = 8
    prefix_sharing: str = "identical"

    def __post_init__(self):
        if not isinstance(self.max_new_tokens, (int, np.integer)) or self.max_new_tokens < 1:
            raise ValueError(
                f"GenerationConfig: max_new_tokens={self.max_new_tokens!r} must be >= 1."
            )
        if self.prefix_sharing not in PREFIX_SHARING_MODES:
            raise ValueError(
                f"GenerationConfig: prefix_sharing={self.prefix_sharing!r} must be one of "
                f"{PREFIX_SHARING_MODES}."
            )
        if self.min_compact_batch < 1:
            raise ValueError(
                f"GenerationConfig: min_compact_batch={self.min_compact_batch} must be >= 1."
            )
        if self.top_k is not None and self.top_k < 1:
            raise ValueError(f"GenerationConfig: top_k={self.top_k} must be >= 1 (or None).")
        for name in ("temperature", "top_p", "min_p"):
            value = getattr(self, name)
            if isinstance(value, (list, np.ndarray)):
                object.__setattr__(self, name, tuple(float(v) for v in value))
        for t in np.atleast_1d(self.temperature):
            if t < 0:
                raise ValueError(f"GenerationConfig: temperature={t} must be >= 0 (0 = greedy).")
        if self.top_p is not None:
            for p in np.atleast_1d(self.top_p):
                if not 0 < p <= 1:
                    raise ValueError(f"GenerationConfig: top_p={p} must be in (0, 1].")
        if self.min_p is not None:
            for p in np.atleast_1d(self.min_p):
                if not 0 <= p <= 1:
                    raise ValueError(f"GenerationConfig: min_p={p} must be in [0, 1].")
        if self.eos_ids is not None:
            object.__setattr__(self, "eos_ids", tuple(int(i) for i in self.eos_ids))
        object.__setattr__(
            self, "stop_sequences", tuple(tuple(int(t) for t in s) for s in self.stop_sequences)
        )

    def replace(self, **changes: Any) -> GenerationConfig:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)


class _Static(NamedTuple):
    """The options that change the compiled program (hashable static argument)."""

    max_new_tokens: int
    top_k: int | None
    use_top_p: bool
    use_min_p: bool
    pad_id: int
    cache_dtype: str | None
    stages: tuple[int, ...]  # decode batch of each compaction stage, decreasing
    copies_rows: bool  # the prefill plan shares rows (a cache gather follows the prefill)


class DecodeWork(NamedTuple):
    """What one rollout computed, against what the plain engine computes for the same batch.

    Attributes (int32 scalars):
      prefill_tokens: token positions run through prefill (shared prefix once + unique rows).
      prefill_tokens_plain: B_pad x P, every row prefilled in full.
      decode_row_steps: the sum over decode steps of the decode batch (it shrinks as rows
        finish, with compaction).
      decode_row_steps_plain: B_pad x the number of decode steps (the uncompacted loop, which
        stops at the same step).
      decode_steps: forward passes of the decode loop (the first token comes from prefill).
    """

    prefill_tokens: Array
    prefill_tokens_plain: Array
    decode_row_steps: Array
    decode_row_steps_plain: Array
    decode_steps: Array

    def saved(self) -> dict[str, float]:
        """Host floats: the fraction of prefill and of decode work not computed."""
        get = lambda x: float(np.asarray(x))
        return {
            "prefill_saved": 1.0
            - get(self.prefill_tokens) / max(get(self.prefill_tokens_plain), 1),
            "decode_saved": 1.0
            - get(self.decode_row_steps) / max(get(self.decode_row_steps_plain), 1),
        }


class RowResults(NamedTuple):
    """Per-row results over the whole padded batch (indexed by row, never compacted)."""

    tokens: Array  # int32 [B, T]
    logprobs: Array  # float32 [B, T]
    raw_logprobs: Array  # float32 [B, T]
    done: Array  # bool [B]
    lengths: Array  # int32 [B]
    finish: Array  # int32 [B]


class DecodeSlots(NamedTuple):
    """The decode batch of one compaction stage: b slots, each holding one row."""

    rows: Array  # int32 [b], the row in each slot (distinct)
    cache: KVCache  # [b, K, S, H] per layer
    last_token: Array  # int32 [b], token j - 1 of the slot's row
    window: Array  # int32 [b, W], the last W completion tokens (WINDOW_EMPTY before the first)


class _LoopState(NamedTuple):
    step: Array  # [] tokens sampled so far, j
    rows: RowResults
    slots: DecodeSlots
    row_steps: Array  # [] decode row-steps computed so far


def next_token_logits(model: Transformer, hidden_bd: Array) -> Array:
    """float32 logits [B, V] of final hidden states [B, D] (float32 accumulation in any dtype)."""
    return jnp.einsum(
        "bd,dv->bv", hidden_bd, model.unembed_matrix(), preferred_element_type=jnp.float32
    )


def prefill(
    model: Transformer, tokens_bt: Array, lengths_b: Array, cache: KVCache, *, start: int = 0
) -> tuple[Array, KVCache]:
    """Runs right-padded prompts (or prompt suffixes) through the model, filling the cache.

    Args:
      model: the transformer.
      tokens_bt: int32 [B, P], row b's tokens at 0..p_b-1, anything after.
      lengths_b: int32 [B], p_b >= 1.
      cache: a `KVCache` with at least start + P slots; slots 0..start-1 already hold a prefix
        every row continues.
      start: the position of column 0 (the prefix length already in the cache).

    Returns:
      (float32 logits [B, V] at each row's last token, column p_b - 1, the filled cache).
    """
    b, p = tokens_bt.shape
    positions_bt = jnp.broadcast_to(start + jnp.arange(p, dtype=jnp.int32), (b, p))
    hidden_btd, cache = model.hidden_states(tokens_bt, positions_bt=positions_bt, kv_cache=cache)
    last_bd = jnp.take_along_axis(hidden_btd, (lengths_b - 1)[:, None, None], axis=1)[:, 0]
    return next_token_logits(model, last_bd), cache


def decode_step(
    model: Transformer, tokens_b: Array, positions_b: Array, cache: KVCache
) -> tuple[Array, KVCache]:
    """Feeds one token per row at its position; returns float32 next-token logits [B, V] and the cache."""
    hidden_b1d, cache = model.hidden_states(
        tokens_b[:, None], positions_bt=positions_b[:, None], kv_cache=cache
    )
    return next_token_logits(model, hidden_b1d[:, 0]), cache


class CacheLayout(NamedTuple):
    """Shard the KV cache by a logical-axis rule set: `jaxrl_llm.sharding.cache_shardings`.

    Resolved inside the program for the padded cache shape, so one layout fits every bucket
    (a cache batch the "data" axis does not divide is replicated instead). Hashable.

    Example:
      >>> Generator(model, config, cache_shardings=CacheLayout(mesh, DECODE_RULES))
    """

    mesh: jax.sharding.Mesh
    rules: tuple


def resolve_cache_shardings(cache: KVCache, shardings):
    """A `KVCache` of shardings for `cache` (arrays or shapes) from any accepted form, or None.

    Accepts None, a `CacheLayout`, one `jax.sharding.Sharding` for every array, a `KVCache` of
    shardings, or a callable `cache -> shardings`.
    """
    if shardings is None:
        return None
    if isinstance(shardings, CacheLayout):
        from jaxrl_llm.sharding import cache_shardings  # sharding depends on models only

        return cache_shardings(cache, shardings.mesh, shardings.rules)
    if isinstance(shardings, jax.sharding.Sharding):
        return jax.tree.map(lambda _: shardings, cache)
    if callable(shardings):
        return shardings(cache)
    return shardings


def _extend_cache(cache: KVCache, extra_slots: int) -> KVCache:
    """Appends `extra_slots` zero slots along the cache's sequence axis."""
    if extra_slots <= 0:
        return cache
    axis = KV_CACHE_LOGICAL_AXES.index("cache_sequence")

    def pad(x):
        widths = [(0, 0)] * x.ndim
        widths[axis] = (0, extra_slots)
        return jnp.pad(x, widths)

    return jax.tree.map(pad, cache)


def _constrain(cache: KVCache, shardings) -> KVCache:
    resolved = resolve_cache_shardings(cache, shardings)
    return cache if resolved is None else jax.lax.with_sharding_constraint(cache, resolved)


def _take_rows(tree, index_b: Array):
    """Rows `index_b` of every array in `tree` (axis 0)."""
    return jax.tree.map(lambda x: jnp.take(x, index_b, axis=0), tree)


def compaction_stages(batch: int, *, enabled: bool, min_batch: int) -> tuple[int, ...]:
    """Decode batch sizes of the compaction stages: `batch`, then halved while >= `min_batch`.

    Example:
      >>> compaction_stages(32, enabled=True, min_batch=8)
      (32, 16, 8)
    """
    stages = [batch]
    while enabled and stages[-1] // 2 >= min_batch:
        stages.append(stages[-1] // 2)
    return tuple(stages)


class RowOptions(NamedTuple):
    """Per-row inputs of a decode, indexed by row (not by slot): [B] each."""

    prompt_len: Array  # int32, p_b
    keys: Array  # typed PRNG keys
    budget: Array  # int32, the most tokens row b may sample
    temperature: Array  # float32
    top_p: Array  # float32
    min_p: Array  # float32


def record_tokens(
    rows: RowResults,
    slots: DecodeSlots,
    step_b: Array,
    logits_bv: Array,
    options: RowOptions,
    eos_ids_e: Array,
    stop_sw: Array,
    static: _Static,
) -> tuple[RowResults, DecodeSlots]:
    """Samples token j = step_b of each slot's row and records it; finished rows are masked.

    Args:
      rows: the per-row results ([B, T] tokens and log-probs, [B] done/lengths/finish).
      slots: the decode batch; `slots.rows` are distinct rows.
      step_b: int32 [b], the index j of the token each slot samples now (its key's step and
        column p + j).
      logits_bv: float32 [b, V], the next-token logits of each slot.
      options: `RowOptions`.
      eos_ids_e, stop_sw: packed EOS ids and stop sequences (`batching`).
      static: the program's static options (sampling filters, pad id).

    Returns:
      (rows with token j written where the row was unfinished, slots with the new last token
      and stop window).
    """
    r = slots.rows
    out = sample_tokens(
        step_keys(options.keys[r], step_b),
        logits_bv,
        temperature_b=options.temperature[r],
        top_k=static.top_k,
        top_p_b=options.top_p[r] if static.use_top_p else None,
        min_p_b=options.min_p[r] if static.use_min_p else None,
    )
    alive = ~rows.done[r]
    pos = options.prompt_len[r] + step_b
    tokens = rows.tokens.at[r, pos].set(jnp.where(alive, out.tokens, static.pad_id))
    logprobs = rows.logprobs.at[r, pos].set(jnp.where(alive, out.logprobs, 0.0))
    raw = rows.raw_logprobs.at[r, pos].set(jnp.where(alive, out.raw_logprobs, 0.0))
    window = jnp.concatenate([slots.window[:, 1:], out.tokens[:, None]], axis=1)
    is_eos, is_stop = batching.stop_flags(out.tokens, window, alive, eos_ids_e, stop_sw)
    lengths = rows.lengths[r] + alive.astype(jnp.int32)
    finish = jnp.where(is_eos, int(FinishReason.EOS), rows.finish[r])
    finish = jnp.where(is_stop, int(FinishReason.STOP), finish)
    done = rows.done[r] | is_eos | is_stop | (lengths >= options.budget[r])
    rows = RowResults(
        tokens=tokens,
        logprobs=logprobs,
        raw_logprobs=raw,
        done=rows.done.at[r].set(done),
        lengths=rows.lengths.at[r].set(lengths),
        finish=rows.finish.at[r].set(finish),
    )
    return rows, slots._replace(last_token=out.tokens, window=window)


def initial_rows(prompt_bt: Array, max_new_tokens: int, pad_id: int, *, done_b: Array):
    """`RowResults` before any token: prompts [B, P] left-aligned in [B, P + N], pad after.

    `done_b` bool [B] marks rows that never decode (padding rows). Every array is its own
    buffer, so the results may be donated.
    """
    batch, prompt_bucket = prompt_bt.shape
    total = prompt_bucket + max_new_tokens
    tokens_bt = jnp.full((batch, total), pad_id, jnp.int32)
    return RowResults(
        tokens=tokens_bt.at[:, :prompt_bucket].set(prompt_bt),
        logprobs=jnp.zeros((batch, total), jnp.float32),
        raw_logprobs=jnp.zeros((batch, total), jnp.float32),
        done=jnp.asarray(done_b),
        lengths=jnp.zeros((batch,), jnp.int32),
        finish=jnp.full((batch,), int(FinishReason.LENGTH), jnp.int32),
    )


def initial_slots(rows_b: Array, cache: KVCache, window: int) -> DecodeSlots:
    """Slots holding `rows_b` [b] with `cache` and no token sampled yet."""
    b = rows_b.shape[0]
    return DecodeSlots(
        rows=rows_b,
        cache=cache,
        last_token=jnp.zeros((b,), jnp.int32),
        window=jnp.full((b, window), batching.WINDOW_EMPTY, jnp.int32),
    )


def rollout_of(rows: RowResults, prompt_len_b: Array) -> Rollout:
    """The `Rollout` of finished per-row results (the completion mask from the lengths)."""
    columns = jnp.arange(rows.tokens.shape[1])[None, :]
    completion_bt = (columns >= prompt_len_b[:, None]) & (
        columns < (prompt_len_b + rows.lengths)[:, None]
    )
    return Rollout(
        tokens=rows.tokens,
        completion_mask=completion_bt,
        logprobs=rows.logprobs,
        raw_logprobs=rows.raw_logprobs,
        prompt_lengths=prompt_len_b,
        lengths=rows.lengths,
        finish_reason=rows.finish,
    )


def _shared_prefill(
    model, prefix_l, suffix_us, suffix_len_u, prompt_len: int, cache_dtype, cache_shardings
):
    """Prefills a `PrefillPlan`'s prefix and suffixes into a [U_pad, ..., P] cache.

    Returns (float32 logits [U_pad, V] at each suffix's last token, the cache).
    """
    rows = suffix_us.shape[0]
    start = prefix_l.shape[0]
    cache = model.init_cache(rows, prompt_len, dtype=cache_dtype)
    if start:
        one = model.init_cache(1, prompt_len, dtype=cache_dtype)
        positions = jnp.arange(start, dtype=jnp.int32)[None]
        _, one = model.hidden_states(prefix_l[None], positions_bt=positions, kv_cache=one)
        cache = jax.tree.map(lambda x: jnp.broadcast_to(x, (rows,) + x.shape[1:]), one)
    cache = _constrain(cache, cache_shardings)
    return prefill(model, suffix_us, suffix_len_u, cache, start=start)


class PaddedInputs(NamedTuple):
    """A packed batch's device inputs to the decode programs (see `Generator.padded_inputs`)."""

    prompt_bt: Array  # int32 [B_pad, P]
    prefix_l: Array  # int32 [L], the prefix every prompt shares (empty unless "common")
    suffix_us: Array  # int32 [U_pad, P - L], the prompts to prefill
    suffix_len_u: Array  # int32 [U_pad]
    source_b: Array  # int32 [B_pad], the prefilled row each row copies
    active_b: Array  # bool [B_pad], False at padding rows
    options: RowOptions
    eos_ids_e: Array
    stop_sw: Array


def start_decode(
    model: Transformer, inputs: PaddedInputs, *, static: _Static, cache_shardings
) -> _LoopState:
    """Prefill and the first sampled token: the decode state at step 1, first stage's slots."""
    batch, prompt_bucket = inputs.prompt_bt.shape
    n_new = static.max_new_tokens
    cache_dtype = None if static.cache_dtype is None else jnp.dtype(static.cache_dtype)
    # Prefill into a P-slot cache (its attention then spans P keys, not P + N), then extend it
    # with zero slots: the last sampled token is never fed back, so P + N - 1 slots suffice.
    logits_bv, cache = _shared_prefill(
        model,
        inputs.prefix_l,
        inputs.suffix_us,
        inputs.suffix_len_u,
        prompt_bucket,
        cache_dtype,
        cache_shardings,
    )
    if static.copies_rows:
        source_b = inputs.source_b
        logits_bv, cache = jnp.take(logits_bv, source_b, axis=0), _take_rows(cache, source_b)
        # Laid out by rows at once: unconstrained, XLA built the copied cache whole on every
        # device of a data axis before slicing it (143 GB per v5e chip for an 8B model's 1,024
        # rows; docs/scale.md).
        cache = _constrain(cache, cache_shardings)
    cache = _constrain(_extend_cache(cache, n_new - 1), cache_shardings)
    init = _LoopState(
        step=jnp.zeros((), jnp.int32),
        rows=initial_rows(inputs.prompt_bt, n_new, static.pad_id, done_b=~inputs.active_b),
        slots=initial_slots(jnp.arange(batch, dtype=jnp.int32), cache, inputs.stop_sw.shape[1]),
        row_steps=jnp.zeros((), jnp.int32),
    )
    return _record_step(init, logits_bv, inputs, static)


def _record_step(
    s: _LoopState, logits_bv: Array, inputs: PaddedInputs, static: _Static
) -> _LoopState:
    step_b = jnp.broadcast_to(s.step, s.slots.rows.shape)
    rows, slots = record_tokens(
        s.rows, s.slots, step_b, logits_bv, inputs.options, inputs.eos_ids_e, inputs.stop_sw, static
    )
    return s._replace(step=s.step + 1, rows=rows, slots=slots)


def live_rows(s: _LoopState) -> Array:
    """int32 []: unfinished rows in the current decode batch."""
    return jnp.sum(~s.rows.done[s.slots.rows])


def decode_until(
    model: Transformer,
    s: _LoopState,
    inputs: PaddedInputs,
    *,
    until: Array | int,
    next_size: Array | int,
    static: _Static,
    cache_shardings,
) -> _LoopState:
    """Decodes the current stage's batch while fewer than `until` (<= N) tokens are sampled and
    more than `next_size` of its rows are unfinished."""
    prompt_len = inputs.options.prompt_len

    def body(s: _LoopState) -> _LoopState:
        # Finished rows in the batch keep computing (it is dense) but their writes are masked.
        slots = s.slots
        positions = prompt_len[slots.rows] + s.step - 1
        logits_bv, cache = decode_step(model, slots.last_token, positions, slots.cache)
        s = s._replace(
            slots=slots._replace(cache=_constrain(cache, cache_shardings)),
            row_steps=s.row_steps + slots.rows.shape[0],
        )
        return _record_step(s, logits_bv, inputs, static)

    def cond(s: _LoopState) -> Array:
        return (s.step < jnp.minimum(until, static.max_new_tokens)) & (live_rows(s) > next_size)

    return jax.lax.while_loop(cond, body, s)


def compact(s: _LoopState, size: int, cache_shardings) -> _LoopState:
    """Gathers the live rows (first, in slot order) into a decode batch of `size` slots."""
    order = jnp.argsort((s.rows.done[s.slots.rows]).astype(jnp.int32))[:size]
    slots = _take_rows(s.slots, order)
    return s._replace(slots=slots._replace(cache=_constrain(slots.cache, cache_shardings)))


def finish_decode(s: _LoopState, inputs: PaddedInputs) -> tuple[Rollout, DecodeWork]:
    """The `Rollout` and `DecodeWork` of a finished decode state."""
    batch, prompt_bucket = inputs.prompt_bt.shape
    rollout = rollout_of(s.rows, inputs.options.prompt_len)
    steps = s.step - 1
    prefill_tokens = inputs.prefix_l.shape[0] + inputs.suffix_us.size
    work = DecodeWork(
        prefill_tokens=jnp.asarray(prefill_tokens, jnp.int32),
        prefill_tokens_plain=jnp.asarray(batch * prompt_bucket, jnp.int32),
        decode_row_steps=s.row_steps,
        decode_row_steps_plain=steps * batch,
        decode_steps=steps,
    )
    return rollout, work


@functools.partial(jax.jit, static_argnames=("graphdef", "static", "cache_shardings"))
def _generate_padded(state, inputs: PaddedInputs, *, graphdef, static: _Static, cache_shardings):
    _TRACES["generate"] += 1
    model = nnx.merge(graphdef, state)
    s = start_decode(model, inputs, static=static, cache_shardings=cache_shardings)
    # Compaction: stage i decodes a batch of stages[i] slots until its live rows fit the next
    # stage, then the live rows are gathered into the smaller batch.
    for i, size in enumerate(static.stages):
        if i > 0:
            s = compact(s, size, cache_shardings)
        next_size = static.stages[i + 1] if i + 1 < len(static.stages) else 0
        s = decode_until(
            model,
            s,
            inputs,
            until=static.max_new_tokens,
            next_size=next_size,
            static=static,
            cache_shardings=cache_shardings,
        )
    return finish_decode(s, inputs)


def _per_row(value, batch: int, padded: int, default: float) -> np.ndarray:
    """A float32 [padded] array from a scalar or a per-prompt sequence (padding rows: default)."""
    out = np.full((padded,), default, np.float32)
    if value is None:
        return out
    arr = np.asarray(value, np.float32)
    if arr.ndim == 0:
        out[:batch] = arr
    elif arr.shape == (batch,):
        out[:batch] = arr
    else:
        raise ValueError(f"generate: got {arr.size} per-prompt values for {batch} prompts.")
    return out


class Generator:
    """A reusable rollout engine: one model, one `GenerationConfig`, compiled programs cached.

    Calls with the same padded shapes reuse one compiled program (the cache is keyed on the
    model's structure, the static options and the bucketed shapes, so separate `Generator`s of
    the same model share it too). Weights are read from the model at every call, so in-place
    updates (or an explicit `params=` state) take effect without recompiling.

    Args:
      model: a `Transformer` (its params may be sharded; the program follows them).
      config: the `GenerationConfig`.
      cache_shardings: how to lay out the KV cache: None (let XLA choose, following the params),
        a `CacheLayout(mesh, rules)` (recommended: resolved per bucket), one
        `jax.sharding.Sharding` for every cache array, a `KVCache` of shardings for exactly the
        padded cache shape, or a hashable callable `cache -> shardings`. It is a static argument
        of the compiled program: keep the same object across calls.

    Example:
      >>> gen = Generator(model, GenerationConfig(max_new_tokens=32, temperature=0.7, top_p=0.9))
      >>> rollout = gen([[1, 2, 3], [4, 5]], seed=0)
      >>> rollout.completions()
    """

    def __init__(self, model: Transformer, config: GenerationConfig, *, cache_shardings=None):
        self.model = model
        self.config = config
        self.cache_shardings = cache_shardings
        eos = config.eos_ids
        if eos is None:
            eos = () if model.config.eos_token_id is None else (model.config.eos_token_id,)
        self.eos_ids = tuple(eos)
        self._stop = batching.pack_stop_sequences(config.stop_sequences)
        self._eos = batching.pack_eos_ids(self.eos_ids)

    def __call__(
        self,
        prompts: Sequence[Sequence[int]],
        *,
        seed: int | Sequence[int] = 0,
        params: nnx.State | None = None,
        max_new_tokens: Sequence[int] | None = None,
    ) -> Rollout:
        """Samples completions of `prompts` (ragged token-id lists); see `Rollout` for the layout.

        Args:
          prompts: B token-id sequences, each non-empty.
          seed: one int (row b uses `fold_in(key(seed), b)`) or one int per prompt.
          params: an `nnx.State` of the model's parameters to use instead of the model's own.
          max_new_tokens: an optional budget per prompt, each in 1..config.max_new_tokens (a
            row that reaches its budget finishes with `FinishReason.LENGTH`).

        Returns:
          `Rollout` with B rows and T = prompt bucket + config.max_new_tokens columns.
        """
        return self.generate_with_work(
            prompts, seed=seed, params=params, max_new_tokens=max_new_tokens
        )[0]

    def generate_with_work(
        self,
        prompts: Sequence[Sequence[int]],
        *,
        seed: int | Sequence[int] = 0,
        params: nnx.State | None = None,
        max_new_tokens: Sequence[int] | None = None,
        row_offset: int = 0,
    ) -> tuple[Rollout, DecodeWork]:
        """`__call__`, also returning the `DecodeWork` (prefill and decode computed vs plain).
        `row_offset`: these prompts are rows `row_offset...` of a larger batch split in chunks
        (one int `seed` then gives each row the key it has in the whole batch)."""
        inputs, batch, copies_rows = self.padded_inputs(
            prompts, seed, max_new_tokens, row_offset=row_offset
        )
        padded = inputs.prompt_bt.shape[0]
        config = self.config
        graphdef, state = nnx.split(self.model)
        if params is not None:
            state = params
        stages = compaction_stages(
            padded, enabled=config.compaction, min_batch=config.min_compact_batch
        )
        out, work = _generate_padded(
            state,
            inputs,
            graphdef=graphdef,
            static=self.program_options(stages, copies_rows=copies_rows),
            cache_shardings=self.cache_shardings,
        )
        if padded != batch:
            out = Rollout(*(x[:batch] for x in out))
        return out, work

    def lower(self, prompts: Sequence[Sequence[int]], *, params, input_sharding=None):
        """The decode program of a call with `prompts`, lowered for ahead-of-time compilation
        (`jaxrl_llm.scale`): `params` may be `jax.ShapeDtypeStruct`s with shardings, and
        `input_sharding` places the (small) prompt and option arrays, e.g. replicated on the
        params' mesh. Returns a `jax.stages.Lowered`."""
        inputs, _, copies_rows = self.padded_inputs(prompts, 0, None)
        if input_sharding is not None:
            inputs = jax.tree.map(
                lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=input_sharding), inputs
            )
        config = self.config
        stages = compaction_stages(
            inputs.prompt_bt.shape[0], enabled=config.compaction, min_batch=config.min_compact_batch
        )
        return _generate_padded.lower(
            params,
            inputs,
            graphdef=nnx.graphdef(self.model),
            static=self.program_options(stages, copies_rows=copies_rows),
            cache_shardings=self.cache_shardings,
        )

    def padded_inputs(
        self, prompts: Sequence[Sequence[int]], seed, max_new_tokens, *, row_offset: int = 0
    ) -> tuple[PaddedInputs, int, bool]:
        """The decode programs' inputs for `prompts` (packed into buckets, prefill planned), the
        number of real prompts B, and whether the prefill plan shares rows."""
        config = self.config
        packed = batching.pack_prompts(
            prompts,
            pad_id=config.pad_id,
            min_prompt_bucket=config.min_prompt_bucket,
            min_batch_bucket=config.min_batch_bucket,
        )
        batch, padded = packed.batch_size, packed.tokens.shape[0]
        plan = plan_prefill(
            prompts,
            padded_batch=padded,
            prompt_bucket=packed.tokens.shape[1],
            pad_id=config.pad_id,
            mode=config.prefix_sharing,
        )
        inputs = PaddedInputs(
            prompt_bt=jnp.asarray(packed.tokens),
            prefix_l=jnp.asarray(plan.prefix),
            suffix_us=jnp.asarray(plan.suffixes),
            suffix_len_u=jnp.asarray(plan.suffix_lengths),
            source_b=jnp.asarray(plan.source),
            active_b=jnp.asarray(packed.active),
            options=self._row_options(packed.lengths, batch, seed, max_new_tokens, row_offset),
            eos_ids_e=jnp.asarray(self._eos),
            stop_sw=jnp.asarray(self._stop),
        )
        return inputs, batch, plan.copies_rows

    def program_options(self, stages: tuple[int, ...], *, copies_rows: bool) -> _Static:
        """The static options of a decode program for this config."""
        c = self.config
        return _Static(
            max_new_tokens=int(c.max_new_tokens),
            top_k=c.top_k,
            use_top_p=c.top_p is not None,
            use_min_p=c.min_p is not None,
            pad_id=int(c.pad_id),
            cache_dtype=c.cache_dtype,
            stages=stages,
            copies_rows=copies_rows,
        )

    def _row_options(
        self, prompt_len_b, batch: int, seed, max_new_tokens, row_offset: int = 0
    ) -> RowOptions:
        """`RowOptions` of B prompts padded to len(prompt_len_b) rows (padding rows: seed 0,
        temperature 1, the full budget).

        Args:
          prompt_len_b: int [B_pad] prompt lengths, padding rows included.
          batch: B, the real prompts.
          seed: one int (row b: `fold_in(key(seed), b)`) or one int per prompt.
          max_new_tokens: None or a budget per prompt (see `__call__`).
        """
        c, padded = self.config, len(prompt_len_b)
        if isinstance(seed, (int, np.integer)):
            keys = sequence_keys(seed, padded, offset=row_offset)
        else:
            if len(seed) != batch:
                raise ValueError(f"generate: got {len(seed)} seeds for {batch} prompts.")
            keys = sequence_keys(list(seed) + [0] * (padded - batch), padded)
        return RowOptions(
            prompt_len=jnp.asarray(prompt_len_b, jnp.int32),
            keys=keys,
            budget=jnp.asarray(self._budgets(max_new_tokens, batch, padded)),
            temperature=jnp.asarray(_per_row(c.temperature, batch, padded, 1.0)),
            top_p=jnp.asarray(_per_row(c.top_p, batch, padded, 1.0)),
            min_p=jnp.asarray(_per_row(c.min_p, batch, padded, 0.0)),
        )

    def _budgets(self, max_new_tokens, batch: int, padded: int) -> np.ndarray:
        """int32 [padded] per-row token budgets (config.max_new_tokens where none is given)."""
        limit = int(self.config.max_new_tokens)
        budgets = np.full((padded,), limit, np.int32)
        if max_new_tokens is None:
            return budgets
        given = np.asarray(max_new_tokens, np.int64)
        if given.shape != (batch,):
            raise ValueError(
                f"generate: got {given.size} max_new_tokens values for {batch} prompts."
            )
        if given.min() < 1 or given.max() > limit:
            raise ValueError(
                f"generate: max_new_tokens per prompt must be in 1..{limit} "
                f"(GenerationConfig.max_new_tokens); got {given.min()}..{given.max()}."
            )
        budgets[:batch] = given
        return budgets


def generate(
    model: Transformer,
    prompts: Sequence[Sequence[int]],
    *,
    max_new_tokens: int,
    temperature: float | Sequence[float] = 1.0,
    top_k: int | None = None,
    top_p: float | Sequence[float] | None = None,
    seed: int | Sequence[int] = 0,
    eos_ids: Sequence[int] | None = None,
    min_p: float | Sequence[float] | None = None,
    stop_sequences: Sequence[Sequence[int]] = (),
    pad_id: int = 0,
    cache_shardings=None,
) -> Rollout:
    """Samples a completion for each prompt; the whole decode runs in one jitted program.

    Args:
      model: a `Transformer`.
      prompts: B ragged token-id lists, each non-empty.
      max_new_tokens: N.
      temperature: float >= 0 or one per prompt; 0 is greedy.
      top_k: keep the k most likely tokens (None: all).
      top_p: nucleus mass in (0, 1], or one per prompt (None: off).
      seed: int (row b uses `fold_in(key(seed), b)`) or one int per prompt.
      eos_ids: ids that end a completion; None uses `model.config.eos_token_id` if set.
      min_p: min-p ratio, or one per prompt (None: off).
      stop_sequences: token-id sequences that end a completion.
      pad_id: filler token.
      cache_shardings: optional KV-cache sharding (see `Generator`).

    Returns:
      A `Rollout`: tokens [B, P + N] (prompt left-aligned, completion after it, then pad_id),
      completion_mask, logprobs (sampled distribution), raw_logprobs (temperature 1, unfiltered),
      prompt_lengths, lengths, finish_reason.

    Example:
      >>> model, tokenizer = jaxrl_llm.models.from_pretrained("smollm2-135m-instruct")
      >>> r = generate(model, [tokenizer.encode("The capital of France is")],
      ...              max_new_tokens=8, temperature=0.0)
      >>> tokenizer.decode(r.completions()[0])
      ' Paris...'
    """
    config = GenerationConfig(
        max_new_tokens=max_new_tokens,
        temperature=temperature if np.ndim(temperature) == 0 else tuple(temperature),
        top_k=top_k,
        top_p=top_p if top_p is None or np.ndim(top_p) == 0 else tuple(top_p),
        min_p=min_p if min_p is None or np.ndim(min_p) == 0 else tuple(min_p),
        eos_ids=None if eos_ids is None else tuple(eos_ids),
        stop_sequences=tuple(tuple(s) for s in stop_sequences),
        pad_id=pad_id,
    )
    return Generator(model, config, cache_shardings=cache_shardings)(prompts, seed=seed)
