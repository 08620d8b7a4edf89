"""Multi-turn episodes on device: decode slots that pause at each turn's end and take new tokens.

An episode is one row of [R, T] results: its prompt, then each model turn exactly as sampled,
then each observation (tool results, the next user message) as the host rendered it, and so on,
left-aligned (position = column = cache slot). The host never re-encodes a model turn: the ids
in a row are the ids the sampler drew, so a trainer's teacher-forced forward over the row scores
exactly the tokens that were sampled (the rollout log-prob == trainer log-prob invariant of
single-turn rollouts, extended to whole episodes).

`num_slots` rows decode together, each slot holding one episode's KV cache of T positions. Two
jitted programs (the pool donated, so it is updated in place):

  append   feed each chosen slot's new tokens (a prompt, or an observation) at its row's next
           positions: only those tokens run through the model, filling the slot's cache at
           those positions (the conversation so far is never prefilled again); then sample the
           first token of the slot's next turn from the logits at the last new token.
  decode   a `lax.while_loop` of decode steps over every slot; a slot samples while its turn
           runs and is masked (its cache writes dropped) while it waits for the host. The loop
           returns once `target` of the slots that were decoding have ended their turns, so the
           host acts on a few episodes at a time while the others keep their state.

A turn ends at an end-of-turn id (`GenerationConfig.eos_ids`, included in the turn), a stop
sequence (matched within the turn), the turn's token budget, or the row's last column. Row r
samples its j-th model token (counted over all its turns) with `fold_in(fold_in(key(seed), r), j)`,
so an episode's tokens do not depend on its slot or on the other episodes in flight.

    decoder = EpisodeDecoder(model, config, num_slots=16, max_length=512)
    pool = decoder.init(num_rows=32, seed=0)
    pool = decoder.append(pool, {slot: Addition(row, prompt_ids, turn_budget)}, params=params)
    pool = decoder.decode(pool, target=4, params=params)
    view = decoder.view(pool)                     # numpy: which slots wait, each row's tokens

The host loop that drives environments through these calls is `jaxrl_llm.envs.run_episodes`.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxrl_llm.models.precision import merge_for_compute
from jaxrl_llm.models.transformer import KVCache, Transformer
from jaxrl_llm.rollout import batching, kv_cache
from jaxrl_llm.rollout.decode_state import decode_step, next_token_logits, per_row_values
from jaxrl_llm.rollout.engine import GenerationConfig
from jaxrl_llm.rollout.sampling import sample_tokens, sequence_keys, step_keys
from jaxrl_llm.rollout.types import FinishReason

Array = jax.Array

__all__ = ["Addition", "EpisodeDecoder", "EpisodePool", "EpisodeRows", "EpisodeView"]


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


class _Static(NamedTuple):
    top_k: int | None
    use_top_p: bool
    use_min_p: bool
    pad_id: int


class Addition(NamedTuple):
    """New tokens for one slot (`EpisodeDecoder.append`).

    Attributes:
      row: the episode row the slot holds from now on (a new row for a prompt).
      tokens: the token ids to append after the row's current tokens (non-empty).
      turn_budget: the most tokens the turn that follows may sample (>= 1).
    """

    row: int
    tokens: Sequence[int]
    turn_budget: int


class EpisodeView(NamedTuple):
    """What the host reads after a program (numpy).

    Attributes:
      slot_rows: int32 [S], the row of each slot (R: empty).
      tokens: int32 [R, T]; length, finish: int32 [R]; decoding: bool [R].
    """

    slot_rows: np.ndarray
    tokens: np.ndarray
    length: np.ndarray
    decoding: np.ndarray
    finish: np.ndarray


_episode_program = functools.partial(
    jax.jit, static_argnames=("graphdef", "static", "cache_shardings"), donate_argnames=("pool",)
)


def _record(
    pool: EpisodePool,
    logits_sv: Array,
    active_s: Array,
    eos_ids_e: Array,
    stop_sw: Array,
    static: _Static,
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
def _append(
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
    static: _Static,
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
    return _record(pool, logits_sv, active_s, eos_ids_e, stop_sw, static)


@_episode_program
def _decode(
    state,
    pool: EpisodePool,
    target: Array,
    eos_ids_e: Array,
    stop_sw: Array,
    *,
    graphdef,
    static: _Static,
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
        return _record(p, logits_sv, active_s, eos_ids_e, stop_sw, static)

    return jax.lax.while_loop(cond, body, pool)


class EpisodeDecoder:
    """Prefill-on-append / decode-until-turn-end programs over `num_slots` episode slots.

    Args:
      model: a `Transformer` (its structure; weights come from `params=` or the model).
      config: a `GenerationConfig` for the sampling options (temperature, top_k, top_p,
        min_p), the end-of-turn ids (`eos_ids`), stop sequences, `pad_id` and `cache_dtype`;
        its `max_new_tokens` is not used (each turn's budget comes with its `Addition`).
      num_slots: S, episodes decoded together.
      max_length: T, the most tokens of an episode (prompt, turns and observations): the row
        width and every slot's cache length.
      cache_shardings: as in `Generator` (a `CacheLayout` or shardings of the [S, ...] cache).

    Example:
      >>> decoder = EpisodeDecoder(model, GenerationConfig(max_new_tokens=1, eos_ids=(2,)),
      ...                          num_slots=4, max_length=64)
      >>> pool = decoder.init(num_rows=4, seed=0)
      >>> pool = decoder.append(pool, {0: Addition(row=0, tokens=[5, 6, 7], turn_budget=8)})
      >>> pool = decoder.decode(pool, target=1)
      >>> decoder.view(pool).decoding[0]        # the turn ended (EOS or 8 tokens)
      False
    """

    def __init__(
        self,
        model: Transformer,
        config: GenerationConfig,
        *,
        num_slots: int,
        max_length: int,
        cache_shardings=None,
    ):
        if num_slots < 1:
            raise ValueError(f"EpisodeDecoder: num_slots={num_slots} must be >= 1.")
        if max_length < 2:
            raise ValueError(f"EpisodeDecoder: max_length={max_length} must be >= 2.")
        self.model, self.config = model, config
        self.num_slots, self.max_length = num_slots, max_length
        self.cache_shardings = cache_shardings
        eos = config.eos_ids
        if eos is None:
            eos = () if model.config.eos_token_id is None else (model.config.eos_token_id,)
        self._eos = jnp.asarray(batching.pack_eos_ids(tuple(eos)))
        self._stop = jnp.asarray(batching.pack_stop_sequences(config.stop_sequences))
        self._static = _Static(
            top_k=config.top_k,
            use_top_p=config.top_p is not None,
            use_min_p=config.min_p is not None,
            pad_id=int(config.pad_id),
        )

    def init(self, num_rows: int, *, seed: int | Sequence[int] = 0) -> EpisodePool:
        """An empty pool for `num_rows` episodes: every slot empty, every row without tokens.

        Args:
          num_rows: R, the episodes of this batch (rows 0..R-1).
          seed: one int (row r: `fold_in(key(seed), r)`) or one per row.
        """
        c, n, width = self.config, self.num_slots, self.max_length
        total = num_rows + 1
        if isinstance(seed, (int, np.integer)):
            keys = sequence_keys(int(seed), total)
        else:
            if len(seed) != num_rows:
                raise ValueError(f"EpisodeDecoder.init: {len(seed)} seeds for {num_rows} rows.")
            keys = sequence_keys(list(seed) + [0], total)
        cache_dtype = None if c.cache_dtype is None else jnp.dtype(c.cache_dtype)
        cache = kv_cache.allocate(
            self.model, n, width, dtype=cache_dtype, shardings=self.cache_shardings
        )
        zeros_i = lambda shape: jnp.zeros(shape, jnp.int32)
        rows = EpisodeRows(
            tokens=jnp.full((total, width), c.pad_id, jnp.int32),
            logprobs=jnp.zeros((total, width), jnp.float32),
            raw_logprobs=jnp.zeros((total, width), jnp.float32),
            model_mask=jnp.zeros((total, width), bool),
            length=zeros_i((total,)),
            sampled=zeros_i((total,)),
            turn_tokens=zeros_i((total,)),
            turn_budget=jnp.ones((total,), jnp.int32),
            decoding=jnp.zeros((total,), bool),
            finish=zeros_i((total,)),
        )
        slots = EpisodeSlots(
            rows=jnp.full((n,), num_rows, jnp.int32),
            cache=cache,
            last_token=zeros_i((n,)),
            window=jnp.full((n, self._stop.shape[1]), batching.WINDOW_EMPTY, jnp.int32),
        )
        options = EpisodeOptions(
            keys=keys,
            temperature=jnp.asarray(per_row_values(c.temperature, total, total, 1.0)),
            top_p=jnp.asarray(per_row_values(c.top_p, total, total, 1.0)),
            min_p=jnp.asarray(per_row_values(c.min_p, total, total, 0.0)),
        )
        counter = lambda: jnp.zeros((), jnp.int32)
        return EpisodePool(rows, slots, options, *(counter() for _ in range(5)))

    def _program_args(self, params):
        graphdef, state = nnx.split(self.model)
        kw = dict(graphdef=graphdef, static=self._static, cache_shardings=self.cache_shardings)
        return (state if params is None else params), kw

    def append(
        self,
        pool: EpisodePool,
        additions: Mapping[int, Addition],
        *,
        params: nnx.State | None = None,
        slot_rows: np.ndarray | None = None,
        min_bucket: int = 16,
    ) -> EpisodePool:
        """Appends tokens to some slots' rows and starts each one's next turn (donates `pool`).

        Args:
          pool: the current pool.
          additions: slot -> `Addition`; a slot may take a new row (its previous row is left
            as it is), and its tokens must fit the row (length + tokens < T).
          params: the weights (`nnx.State`); None uses the model's own.
          slot_rows: int [S], the current row of each slot (from `view`); None reads it.
          min_bucket: the appended tokens are padded to a power-of-two bucket >= this (one
            compiled program per bucket).

        Returns:
          The pool after the append.
        """
        if not additions:
            return pool
        n = self.num_slots
        if slot_rows is None:
            slot_rows = np.asarray(pool.slots.rows)
        slot_rows = np.array(slot_rows, np.int32)
        # one more column: a continued row's last sampled token is fed first
        longest = max(len(a.tokens) for a in additions.values()) + 1
        bucket = batching.bucket_size(longest, minimum=min_bucket)
        new = np.full((n, bucket), self.config.pad_id, np.int32)
        count = np.zeros((n,), np.int32)
        budget = np.ones((n,), np.int32)
        for slot, addition in additions.items():
            if not 0 <= slot < n:
                raise ValueError(f"EpisodeDecoder.append: slot {slot} is not in 0..{n - 1}.")
            if not addition.tokens:
                raise ValueError(f"EpisodeDecoder.append: slot {slot} has no tokens to append.")
            if addition.turn_budget < 1:
                raise ValueError(
                    f"EpisodeDecoder.append: slot {slot} turn_budget={addition.turn_budget} "
                    "must be >= 1."
                )
            slot_rows[slot] = addition.row
            new[slot, : len(addition.tokens)] = addition.tokens
            count[slot] = len(addition.tokens)
            budget[slot] = addition.turn_budget
        state, kw = self._program_args(params)
        return _append(
            state, pool, jnp.asarray(slot_rows), jnp.asarray(new), jnp.asarray(count),
            jnp.asarray(budget), self._eos, self._stop, **kw,
        )  # fmt: skip

    def decode(
        self, pool: EpisodePool, *, target: int, params: nnx.State | None = None
    ) -> EpisodePool:
        """Decodes until `target` of the running turns have ended, or none runs (donates `pool`)."""
        state, kw = self._program_args(params)
        return _decode(state, pool, jnp.int32(max(1, target)), self._eos, self._stop, **kw)

    def view(self, pool: EpisodePool) -> EpisodeView:
        """The host's view of the pool (copies the token rows and per-row state to the host)."""
        rows = pool.rows
        slot_rows, tokens, length, decoding, finish = jax.device_get(
            (pool.slots.rows, rows.tokens, rows.length, rows.decoding, rows.finish)
        )
        return EpisodeView(slot_rows, tokens[:-1], length[:-1], decoding[:-1], finish[:-1])

    def results(self, pool: EpisodePool) -> dict[str, np.ndarray]:
        """The rows' final arrays on the host: tokens, logprobs, raw_logprobs, model_mask [R, T];
        length, finish [R]; and the work counters (scalars)."""
        rows = jax.device_get(pool.rows)
        out = {
            name: np.asarray(getattr(rows, name))[:-1]
            for name in ("tokens", "logprobs", "raw_logprobs", "model_mask", "length", "finish")
        }
        counters = jax.device_get(
            (pool.prefill_tokens, pool.prefill_positions, pool.decode_row_steps,
             pool.decode_active_steps, pool.decode_steps)
        )  # fmt: skip
        names = ("prefill_tokens", "prefill_positions", "decode_row_steps")
        names += ("decode_active_steps", "decode_steps")
        out.update({name: int(v) for name, v in zip(names, counters, strict=True)})
        return out
