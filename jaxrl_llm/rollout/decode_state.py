"""The state of a decode: per-row results, the slots of the running rows, and the step functions.

A rollout's rows (prompts) keep their results in `RowResults` ([B, T] tokens and log-probs,
indexed by row); the rows still decoding occupy the slots of `DecodeSlots` (their KV cache, last
token and stop window, indexed by slot). One decode step (`decode_until`'s body) feeds every
slot's last token, samples the next and records it by row; `compact` gathers the live rows into
a smaller batch of slots. `engine.Generator` runs these in one jitted program; `inflight` and
`continuous` reuse them. The cache itself comes from `kv_cache`.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_llm.models import decode_kernel
from jaxrl_llm.models.transformer import KVCache, Transformer
from jaxrl_llm.rollout import attention_choice, batching, kv_cache
from jaxrl_llm.rollout.sampling import sample_tokens, step_keys
from jaxrl_llm.rollout.types import FinishReason, Rollout

Array = jax.Array


class DecodeStatic(NamedTuple):
    """The options that change the compiled program (hashable static argument)."""

    max_new_tokens: int
    top_k: int | None
    use_top_p: bool
    use_min_p: bool
    pad_id: int
    cache_dtype: str | None
    stages: tuple[int, ...]  # decode batch of each compaction stage, decreasing
    copies_rows: bool  # the prefill plan shares rows (a cache gather follows the prefill)
    shards: int = 1  # devices the decode rows are split over (compaction stays on each)
    attention: str = "xla"  # the decode steps' attention (`attention_choice.resolve`)
    interpret: bool = False  # run that attention's Pallas kernel in the interpreter (CPU)


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


class LoopState(NamedTuple):
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


def compaction_stages(
    batch: int, *, enabled: bool, min_batch: int, shards: int = 1
) -> tuple[int, ...]:
    """Decode batch sizes of the compaction stages: `batch`, then halved while >= `min_batch`
    (and, with rows split over `shards` devices, while each shard keeps a whole number of rows).

    Example:
      >>> compaction_stages(32, enabled=True, min_batch=8)
      (32, 16, 8)
      >>> compaction_stages(32, enabled=True, min_batch=2, shards=8)
      (32, 16, 8)
    """
    stages = [batch]
    while enabled:
        half = stages[-1] // 2
        if half < max(min_batch, shards) or half % shards:
            break
        stages.append(half)
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
    static: DecodeStatic,
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


def record_step(
    s: LoopState, logits_bv: Array, inputs: PaddedInputs, static: DecodeStatic
) -> LoopState:
    step_b = jnp.broadcast_to(s.step, s.slots.rows.shape)
    rows, slots = record_tokens(
        s.rows, s.slots, step_b, logits_bv, inputs.options, inputs.eos_ids_e, inputs.stop_sw, static
    )
    return s._replace(step=s.step + 1, rows=rows, slots=slots)


def live_rows(s: LoopState, shards: int = 1) -> Array:
    """int32 []: unfinished rows in the current decode batch; with its rows split over `shards`
    devices, the most any shard holds."""
    live_b = ~s.rows.done[s.slots.rows]
    return jnp.max(jnp.sum(live_b.reshape(shards, -1), axis=1))


def decode_until(
    model: Transformer,
    s: LoopState,
    inputs: PaddedInputs,
    *,
    until: Array | int,
    next_size: Array | int,
    static: DecodeStatic,
    cache_shardings,
) -> LoopState:
    """Decodes the current stage's batch while fewer than `until` (<= N) tokens are sampled and
    more than `next_size` of its rows are unfinished (per row shard: more than its share)."""
    prompt_len = inputs.options.prompt_len

    def body(s: LoopState) -> LoopState:
        # Finished rows in the batch keep computing (it is dense) but their writes are masked.
        slots = s.slots
        positions = prompt_len[slots.rows] + s.step - 1
        logits_bv, cache = decode_step(model, slots.last_token, positions, slots.cache)
        s = s._replace(
            slots=slots._replace(cache=kv_cache.constrain(cache, cache_shardings)),
            row_steps=s.row_steps + slots.rows.shape[0],
        )
        return record_step(s, logits_bv, inputs, static)

    def cond(s: LoopState) -> Array:
        live = live_rows(s, static.shards)  # per shard: each must fit its share of next_size
        return (s.step < jnp.minimum(until, static.max_new_tokens)) & (
            live > next_size // static.shards
        )

    with decode_kernel.use(attention_choice.scope(static.attention, static.interpret,
                                                  cache_shardings)):  # fmt: skip
        return jax.lax.while_loop(cond, body, s)


def compact(s: LoopState, size: int, cache_shardings, shards: int = 1) -> LoopState:
    """Gathers the live rows (first, in slot order) into a decode batch of `size` slots; with
    the rows split over `shards` devices, each shard keeps its own `size / shards` (the row
    moves stay on each device: `kv_cache.take_rows_per_shard`)."""
    done_b = s.rows.done[s.slots.rows].astype(jnp.int32)
    if shards == 1:
        slots = kv_cache.take_rows(s.slots, jnp.argsort(done_b)[:size])
    else:
        order_dk = jnp.argsort(done_b.reshape(shards, -1), axis=1)[:, : size // shards]
        slots = kv_cache.take_rows_per_shard(s.slots, order_dk)
    return s._replace(slots=slots._replace(cache=kv_cache.constrain(slots.cache, cache_shardings)))


def per_row_values(value, batch: int, padded: int, default: float) -> np.ndarray:
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


def shared_prefill(
    model, prefix_l, suffix_us, suffix_len_u, prompt_len: int, cache_dtype, cache_shardings
):
    """Prefills a `PrefillPlan`'s prefix and suffixes into a [U_pad, ..., P] cache.

    Returns (float32 logits [U_pad, V] at each suffix's last token, the cache).
    """
    rows = suffix_us.shape[0]
    start = prefix_l.shape[0]
    cache = kv_cache.allocate_in_program(model, rows, prompt_len, dtype=cache_dtype)
    if start:
        one = kv_cache.allocate_in_program(model, 1, prompt_len, dtype=cache_dtype)
        positions = jnp.arange(start, dtype=jnp.int32)[None]
        _, one = model.hidden_states(prefix_l[None], positions_bt=positions, kv_cache=one)
        cache = jax.tree.map(lambda x: jnp.broadcast_to(x, (rows,) + x.shape[1:]), one)
    cache = kv_cache.constrain(cache, cache_shardings)
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
