"""The device side of multi-turn episodes: the pool of episode rows and decode slots, and the
two jitted programs over it (the pool donated, so it is updated in place).

  append_tokens   feed each chosen slot's new tokens (a prompt, or an observation) at its row's
                  next positions: only those tokens run through the model, filling the slot's
                  cache at those positions (the conversation so far is never prefilled again);
                  then sample the first token of the slot's next turn from the logits at the
                  last new token.
  decode_turns    a `lax.while_loop` of decode steps over every slot; a slot samples while its
                  turn runs and is masked (its cache writes dropped) while it waits for the
                  host. The loop returns once `target` of the slots that were decoding have
                  ended their turns, so the host acts on a few episodes at a time while the
                  others keep their state.

Both end with `record_next_token`: a turn ends at an end-of-turn id, a stop sequence, its token
budget or the row's last column. Row r samples its j-th model token (counted over all its
turns) with `fold_in(fold_in(key(seed), r), j)`, so an episode's tokens do not depend on its
slot or on the other episodes in flight. The host-side wrapper is
`jaxrl_llm.rollout.episodes.EpisodeDecoder`.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxrl_llm.models.precision import merge_for_compute
from jaxrl_llm.models.transformer import KVCache
from jaxrl_llm.rollout import batching, kv_cache
from jaxrl_llm.rollout.decode_state import decode_step, next_token_logits
from jaxrl_llm.rollout.sampling import sample_tokens, step_keys
from jaxrl_llm.rollout.types import FinishReason

Array = jax.Array

__all__ = [
    "EpisodeOptions",
    "EpisodePool",
    "EpisodeRows",
    "EpisodeSlots",
    "EpisodeStatic",
    "append_tokens",
    "decode_turns",
    "record_next_token",
]


class EpisodeRows(NamedTuple):
    """Per-episode results, indexed by row; row R (one past the last) is a scratch row that
    empty slots point at.

    Attributes:
      tokens: int32 [R + 1, T], prompt, turns and observations, then pad.
      logprobs: float32 [R + 1, T], sampled log-prob of each model token (0 elsewhere).
      raw_logprobs: float32 [R + 1, T], `log_softmax(logits)` of each model token.
      model_mask: bool [R + 1, T], True exactly at model (sampled) tokens.
      length: int32 [R + 1], tokens in the row so far.
      sampled: int32 [R + 1], model tokens sampled so far (the next token's key step).
      turn_tokens: int32 [R + 1], tokens of the current turn.
      turn_budget: int32 [R + 1], the most tokens the current turn may sample.
      decoding: bool [R + 1], the row's turn is running.
      finish: int32 [R + 1], why the last turn ended (`FinishReason`).
    """

    tokens: Array
    logprobs: Array
    raw_logprobs: Array
    model_mask: Array
    length: Array
    sampled: Array
    turn_tokens: Array
    turn_budget: Array
    decoding: Array
    finish: Array


class EpisodeSlots(NamedTuple):
    """The decode batch: S slots, each holding one row (or the scratch row when empty)."""

    rows: Array  # int32 [S]
    cache: KVCache  # [S, K, T, H] per layer
    last_token: Array  # int32 [S], the row's last token (the next decode step's input)
    window: Array  # int32 [S, W], the turn's last W tokens (stop-sequence matching)


class EpisodeOptions(NamedTuple):
    """Per-row sampling inputs, [R + 1] each."""

    keys: Array
    temperature: Array
    top_p: Array
    min_p: Array


class EpisodePool(NamedTuple):
    """Device state of one batch of episodes (donated to every program)."""

    rows: EpisodeRows
    slots: EpisodeSlots
    options: EpisodeOptions
    prefill_tokens: Array  # [] tokens fed by the append programs (prompts, observations and
    # the last token of each turn an observation follows), real ones only
    prefill_positions: Array  # [] positions the append programs computed (slots x bucket)
    decode_row_steps: Array  # [] decode steps x slots computed
    decode_active_steps: Array  # [] decode steps of slots whose turn was running
    decode_steps: Array  # [] decode forward passes


class EpisodeStatic(NamedTuple):
    """The programs' static arguments: the sampling options fixed for a decoder's life."""

    top_k: int | None
    use_top_p: bool
    use_min_p: bool
    pad_id: int


_episode_program = functools.partial(
    jax.jit, static_argnames=("graphdef", "static", "cache_shardings"), donate_argnames=("pool",)
)


def record_next_token(
    pool: EpisodePool,
    logits_sv: Array,
    active_s: Array,
    eos_ids_e: Array,
    stop_sw: Array,
    static: EpisodeStatic,
) -> EpisodePool:
    """Samples the next token of each active slot's row and writes it at the row's end.

    A turn ends at an EOS id, a stop sequence, its budget or the row's last column; inactive
    slots (waiting, empty) write nothing (their scatter index is past the row, dropped).
    """
    rows, slots, opts = pool.rows, pool.slots, pool.options
    r = slots.rows
    width = rows.tokens.shape[1]
    out = sample_tokens(
        step_keys(opts.keys[r], rows.sampled[r]),
        logits_sv,
        temperature_b=opts.temperature[r],
        top_k=static.top_k,
        top_p_b=opts.top_p[r] if static.use_top_p else None,
        min_p_b=opts.min_p[r] if static.use_min_p else None,
    )
    pos = jnp.where(active_s, rows.length[r], width)
    write = lambda a, v: a.at[r, pos].set(v, mode="drop")
    window = jnp.where(
        active_s[:, None],
        jnp.concatenate([slots.window[:, 1:], out.tokens[:, None]], axis=1),
        slots.window,
    )
    is_eos, is_stop = batching.stop_flags(out.tokens, window, active_s, eos_ids_e, stop_sw)
    step = active_s.astype(jnp.int32)
    length = rows.length[r] + step
    turn_tokens = rows.turn_tokens[r] + step
    ended = active_s & (is_eos | is_stop | (turn_tokens >= rows.turn_budget[r]) | (length >= width))
    finish = jnp.where(is_eos, int(FinishReason.EOS), jnp.where(is_stop, int(FinishReason.STOP), 0))
    # Per-row fields: inactive slots write their row's current values back (only the scratch
    # row is shared between slots, and its values are never read).
    put = lambda a, v: a.at[r].set(v)
    rows = rows._replace(
        tokens=write(rows.tokens, out.tokens),
        logprobs=write(rows.logprobs, out.logprobs),
        raw_logprobs=write(rows.raw_logprobs, out.raw_logprobs),
        model_mask=write(rows.model_mask, True),
        length=put(rows.length, length),
        sampled=put(rows.sampled, rows.sampled[r] + step),
        turn_tokens=put(rows.turn_tokens, turn_tokens),
        decoding=put(rows.decoding, rows.decoding[r] & ~ended),
        finish=put(rows.finish, jnp.where(ended, finish, rows.finish[r])),
    )
    last = jnp.where(active_s, out.tokens, slots.last_token)
    return pool._replace(rows=rows, slots=slots._replace(last_token=last, window=window))


@_episode_program
def append_tokens(
    state,
    pool: EpisodePool,
    slot_rows_s: Array,
    new_sc: Array,
    count_s: Array,
    budget_s: Array,
    eos_ids_e: Array,
    stop_sw: Array,
    *,
    graphdef,
    static: EpisodeStatic,
    cache_shardings,
) -> EpisodePool:
    """Appends `new_sc[s, :count_s[s]]` to the row of slot s (now `slot_rows_s[s]`) through the
    model at the row's next positions, and samples the first token of its next turn; slots with
    `count_s == 0` are untouched."""
    model = merge_for_compute(graphdef, state)
    rows = pool.rows
    width = rows.tokens.shape[1]
    r = slot_rows_s
    active_s = count_s > 0
    start_s = rows.length[r]
    columns = jnp.arange(new_sc.shape[1], dtype=jnp.int32)[None, :]
    # A continued row's last sampled token has not been through the model yet (a turn ends
    # on sampling it): it goes first, at its own position, so the cache holds every token.
    shift_s = (active_s & (start_s > 0)).astype(jnp.int32)
    feed_sc = jnp.where(
        shift_s[:, None] > 0,
        jnp.concatenate([pool.slots.last_token[:, None], new_sc[:, :-1]], axis=1),
        new_sc,
    )
    feed_count_s = count_s + shift_s
    # Padding and untouched slots sit past the cache end: their cache writes are dropped.
    feed_pos_sc = jnp.where(
        columns < feed_count_s[:, None], (start_s - shift_s)[:, None] + columns, width
    )
    hidden_scd, cache = model.hidden_states(
        feed_sc, positions_bt=feed_pos_sc, kv_cache=pool.slots.cache
    )
    last_s = jnp.maximum(feed_count_s - 1, 0)
    last_sd = jnp.take_along_axis(hidden_scd, last_s[:, None, None], axis=1)[:, 0]
    logits_sv = next_token_logits(model, last_sd)
    pos_sc = jnp.where(columns < count_s[:, None], start_s[:, None] + columns, width)
    row_index_sc = jnp.broadcast_to(r[:, None], pos_sc.shape)
    rows = rows._replace(
        tokens=rows.tokens.at[row_index_sc, pos_sc].set(new_sc, mode="drop"),
        length=rows.length.at[r].set(start_s + count_s),
        turn_tokens=rows.turn_tokens.at[r].set(jnp.where(active_s, 0, rows.turn_tokens[r])),
        turn_budget=rows.turn_budget.at[r].set(jnp.where(active_s, budget_s, rows.turn_budget[r])),
        decoding=rows.decoding.at[r].set(rows.decoding[r] | active_s),
    )
    window = jnp.where(active_s[:, None], batching.WINDOW_EMPTY, pool.slots.window)
    slots = pool.slots._replace(
        rows=r, cache=kv_cache.constrain(cache, cache_shardings), window=window
    )
    n = count_s.shape[0]
    pool = pool._replace(
        rows=rows,
        slots=slots,
        prefill_tokens=pool.prefill_tokens + jnp.sum(feed_count_s),
        prefill_positions=pool.prefill_positions + n * new_sc.shape[1],
    )
    return record_next_token(pool, logits_sv, active_s, eos_ids_e, stop_sw, static)


@_episode_program
def decode_turns(
    state,
    pool: EpisodePool,
    target: Array,
    eos_ids_e: Array,
    stop_sw: Array,
    *,
    graphdef,
    static: EpisodeStatic,
    cache_shardings,
) -> EpisodePool:
    """Decode steps over every slot until `target` of the turns running at entry have ended
    (or none runs)."""
    model = merge_for_compute(graphdef, state)
    width = pool.rows.tokens.shape[1]
    n = pool.slots.rows.shape[0]
    running_at_entry = pool.rows.decoding[pool.slots.rows]

    def running(p: EpisodePool) -> Array:
        return p.rows.decoding[p.slots.rows] & running_at_entry

    def cond(p: EpisodePool) -> Array:
        live = running(p)
        ended = jnp.sum(running_at_entry & ~live)
        return (ended < target) & jnp.any(live)

    def body(p: EpisodePool) -> EpisodePool:
        active_s = running(p)
        r = p.slots.rows
        positions = jnp.where(active_s, p.rows.length[r] - 1, width)
        logits_sv, cache = decode_step(model, p.slots.last_token, positions, p.slots.cache)
        p = p._replace(
            slots=p.slots._replace(cache=kv_cache.constrain(cache, cache_shardings)),
            decode_row_steps=p.decode_row_steps + n,
            decode_active_steps=p.decode_active_steps + jnp.sum(active_s),
            decode_steps=p.decode_steps + 1,
        )
        return record_next_token(p, logits_sv, active_s, eos_ids_e, stop_sw, static)

    return jax.lax.while_loop(cond, body, pool)
