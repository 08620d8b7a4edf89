"""Multi-turn episodes on device: decode slots that pause at each turn's end and take new tokens.

An episode is one row of [R, T] results: its prompt, then each model turn exactly as sampled,
then each observation (tool results, the next user message) as the host rendered it, and so on,
left-aligned (position = column = cache slot). The host never re-encodes a model turn: the ids
in a row are the ids the sampler drew, so a trainer's teacher-forced forward over the row scores
exactly the tokens that were sampled (the rollout log-prob == trainer log-prob invariant of
single-turn rollouts, extended to whole episodes).

`num_slots` rows decode together, each slot holding one episode's KV cache of T positions.
`EpisodeDecoder.append` feeds new tokens (a prompt, an observation) into chosen slots and starts
each one's next turn; `EpisodeDecoder.decode` decodes until some turns end. Both are jitted
programs over a donated `EpisodePool` (`jaxrl_llm.rollout.episode_programs`). A turn ends at an
end-of-turn id (`GenerationConfig.eos_ids`, included in the turn), a stop sequence (matched
within the turn), the turn's token budget, or the row's last column.

    decoder = EpisodeDecoder(model, config, num_slots=16, max_length=512)
    pool = decoder.init(num_rows=32, seed=0)
    pool = decoder.append(pool, {slot: Addition(row, prompt_ids, turn_budget)}, params=params)
    pool = decoder.decode(pool, target=4, params=params)
    view = decoder.view(pool)                     # numpy: which slots wait, each row's tokens

The host loop that drives environments through these calls is `jaxrl_llm.envs.run_episodes`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxrl_llm.models.transformer import Transformer
from jaxrl_llm.rollout import batching, kv_cache
from jaxrl_llm.rollout.decode_state import per_row_values
from jaxrl_llm.rollout.engine import GenerationConfig
from jaxrl_llm.rollout.episode_programs import (
    EpisodeOptions,
    EpisodePool,
    EpisodeRows,
    EpisodeSlots,
    EpisodeStatic,
    append_tokens,
    decode_turns,
)
from jaxrl_llm.rollout.sampling import sequence_keys

__all__ = ["Addition", "EpisodeDecoder", "EpisodePool", "EpisodeRows", "EpisodeView"]


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
        self._static = EpisodeStatic(
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
        return append_tokens(
            state, pool, jnp.asarray(slot_rows), jnp.asarray(new), jnp.asarray(count),
            jnp.asarray(budget), self._eos, self._stop, **kw,
        )  # fmt: skip

    def decode(
        self, pool: EpisodePool, *, target: int, params: nnx.State | None = None
    ) -> EpisodePool:
        """Decodes until `target` of the running turns have ended, or none runs (donates `pool`)."""
        state, kw = self._program_args(params)
        return decode_turns(state, pool, jnp.int32(max(1, target)), self._eos, self._stop, **kw)

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
