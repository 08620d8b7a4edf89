"""Continuous batching: a fixed set of decode slots, refilled from a queue of prompts as rows finish.

For large prompt sets (evaluation, ReST-style sampling, the asynchronous runner), one padded batch
per chunk of prompts decodes until its longest row finishes; the other rows idle in the batch.
Here `num_slots` rows decode together; when enough of them have finished, the host admits the
next prompts from the queue into the freed slots (prefilled together, their cache rows scattered
into the slots) and decoding resumes. Two jitted programs do the work:

  admit    prefill k queued prompts (their shared prefix once, as in the plain engine), sample
           their first token, write their cache rows into k free slots.
  decode   a `lax.while_loop` of decode steps over every slot, each slot at its own row's
           position and step, until at least `refill_at` slots are free (or, with an empty
           queue, every row has finished).

Row r is sampled with the keys `fold_in(fold_in(key(seed), r), j)` exactly as `Generator` does,
and a row never reads another row's data, so its completion is the one `Generator` gives for the
same prompt list and seed (bitwise on XLA:CPU when every matmul has at least 8 rows, which the
minimum admission batch of 8 ensures; see `GenerationConfig.min_compact_batch`).

    generator = ContinuousGenerator(model, config, num_slots=32)
    rollout = generator(prompts, seed=0)          # same `Rollout` layout as `Generator`
"""

from __future__ import annotations

import collections
import functools
from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxrl_llm.models.precision import compute_params, merge_for_compute
from jaxrl_llm.models.transformer import KVCache, Transformer
from jaxrl_llm.rollout import batching, kv_cache
from jaxrl_llm.rollout.decode_state import (
    DecodeSlots,
    DecodeStatic,
    DecodeWork,
    RowOptions,
    RowResults,
    decode_step,
    initial_rows,
    initial_slots,
    record_tokens,
    rollout_of,
    shared_prefill,
)
from jaxrl_llm.rollout.engine import GenerationConfig, Generator
from jaxrl_llm.rollout.prefix_sharing import plan_prefill
from jaxrl_llm.rollout.types import Rollout

Array = jax.Array

# The fewest prompts one admission prefills (padding rows fill the rest): fewer rows would run
# the first token's matmuls below 8 rows, which round differently on XLA:CPU.
MIN_ADMIT = 8


class _Pool(NamedTuple):
    """Device state of the slots. Row R (one past the last prompt) is a scratch row that is
    always finished: empty slots point at it, so their masked writes land nowhere visible."""

    rows: RowResults  # [R + 1, T] and [R + 1]
    slots: DecodeSlots  # [num_slots]
    row_steps: Array  # [] decode row-steps computed
    decode_steps: Array  # [] decode forward passes


# The slot programs: compiled per model structure, static options and cache layout; the pool
# (cache and results) is donated, so slots are updated in place.
_slot_program = functools.partial(
    jax.jit, static_argnames=("graphdef", "static", "cache_shardings"), donate_argnames=("pool",)
)


def _free_slots(pool: _Pool) -> Array:
    """bool [num_slots]: the slot holds no unfinished row."""
    return pool.rows.done[pool.slots.rows]


@_slot_program
def _admit(
    state,
    pool: _Pool,
    prefix_l,
    suffix_ks,
    suffix_len_k,
    rows_k,
    slots_k,
    options: RowOptions,
    eos_ids_e,
    stop_sw,
    *,
    graphdef,
    static: DecodeStatic,
    cache_shardings,
) -> _Pool:
    """Prefills k prompts (rows `rows_k`) and installs them in slots `slots_k` (index num_slots:
    a padding entry, dropped); samples and records their first token."""
    model = merge_for_compute(graphdef, state)
    prompt_bucket = pool.rows.tokens.shape[1] - static.max_new_tokens
    cache_dtype = None if static.cache_dtype is None else jnp.dtype(static.cache_dtype)
    logits_kv, cache = shared_prefill(
        model, prefix_l, suffix_ks, suffix_len_k, prompt_bucket, cache_dtype, cache_shardings
    )
    new = initial_slots(rows_k, cache, stop_sw.shape[1])
    first_b = jnp.zeros(rows_k.shape, jnp.int32)
    rows, new = record_tokens(
        pool.rows, new, first_b, logits_kv, options, eos_ids_e, stop_sw, static
    )

    def install(big, small):
        if big.ndim == 4:  # a cache array [slots, K, S, H]: the prompt's P slots
            return big.at[slots_k, :, : small.shape[2]].set(small.astype(big.dtype), mode="drop")
        return big.at[slots_k].set(small, mode="drop")

    slots = jax.tree.map(install, pool.slots, new)
    return pool._replace(
        rows=rows, slots=slots._replace(cache=kv_cache.constrain(slots.cache, cache_shardings))
    )


@_slot_program
def _decode(
    state,
    pool: _Pool,
    refill_at,
    options: RowOptions,
    eos_ids_e,
    stop_sw,
    *,
    graphdef,
    static: DecodeStatic,
    cache_shardings,
) -> _Pool:
    """Decodes every slot until at least `refill_at` slots are free or all are."""
    model = merge_for_compute(graphdef, state)
    num_slots = pool.slots.rows.shape[0]

    def cond(p: _Pool):
        free = jnp.sum(_free_slots(p))
        return (free < refill_at) & (free < num_slots)

    def body(p: _Pool) -> _Pool:
        slots = p.slots
        step_b = p.rows.lengths[slots.rows]  # tokens sampled so far = the index of the next
        positions = options.prompt_len[slots.rows] + step_b - 1
        logits_bv, cache = decode_step(model, slots.last_token, positions, slots.cache)
        slots = slots._replace(cache=kv_cache.constrain(cache, cache_shardings))
        rows, slots = record_tokens(
            p.rows, slots, step_b, logits_bv, options, eos_ids_e, stop_sw, static
        )
        return _Pool(rows, slots, p.row_steps + num_slots, p.decode_steps + 1)

    return jax.lax.while_loop(cond, body, pool)


class ContinuousGenerator(Generator):
    """`Generator`'s rollouts through continuous batching over `num_slots` decode slots.

    Called like `Generator` (same arguments, same `Rollout` layout).

    Args:
      model: a `Transformer`.
      config: the `GenerationConfig` (its `compaction` and `min_batch_bucket` do not apply; its
        `prefix_sharing` "common" shares the prefix of all prompts, "identical" and "none"
        prefill every prompt in full).
      num_slots: rows decoded together.
      refill_at: admit new prompts once this many slots are free (default: a quarter of the
        slots, at least `MIN_ADMIT`).
      cache_shardings: as in `Generator`.

    Example:
      >>> gen = ContinuousGenerator(model, GenerationConfig(max_new_tokens=64, temperature=0.0),
      ...                           num_slots=32)
      >>> rollout = gen(prompt_ids)          # 200 prompts, 32 decoding at a time
    """

    def __init__(
        self,
        model: Transformer,
        config: GenerationConfig,
        *,
        num_slots: int = 32,
        refill_at: int | None = None,
        cache_shardings=None,
    ):
        if num_slots < 1:
            raise ValueError(f"ContinuousGenerator: num_slots={num_slots} must be >= 1.")
        super().__init__(model, config, cache_shardings=cache_shardings)
        self.num_slots = num_slots
        self.refill_at = min(num_slots, refill_at or max(MIN_ADMIT, num_slots // 4))

    def generate_with_work(
        self,
        prompts: Sequence[Sequence[int]],
        *,
        seed: int | Sequence[int] = 0,
        params: nnx.State | None = None,
        max_new_tokens: Sequence[int] | None = None,
    ) -> tuple[Rollout, DecodeWork]:
        """`__call__`, also returning the `DecodeWork` (its "plain" figures: one padded batch of
        every prompt, uncompacted)."""
        config, n = self.config, self.num_slots
        packed = batching.pack_prompts(
            prompts, pad_id=config.pad_id, min_prompt_bucket=config.min_prompt_bucket, bucket=True
        )
        num_rows = packed.batch_size
        prompt_bucket = packed.tokens.shape[1]
        mode = "common" if config.prefix_sharing == "common" else "none"
        plan = plan_prefill(
            prompts, padded_batch=num_rows, prompt_bucket=prompt_bucket, pad_id=config.pad_id,
            mode=mode,
        )  # fmt: skip
        static = self.program_options(n, copies_rows=False, stages=(n,))
        prompt_len = np.ones((num_rows + 1,), np.int32)  # and the scratch row's
        prompt_len[:num_rows] = packed.lengths[:num_rows]
        options = self._row_options(prompt_len, num_rows, seed, max_new_tokens)
        graphdef, state = nnx.split(self.model)
        if params is not None:
            state = params
        # Every admit and decode program reads these weights: cast a mixed-precision master
        # copy to the compute dtype once here, not once per program call.
        state = compute_params(self.model, state)
        kw = dict(graphdef=graphdef, static=static, cache_shardings=self.cache_shardings)
        eos, stop = jnp.asarray(self._eos), jnp.asarray(self._stop)
        pool = self._empty_pool(packed.tokens[:num_rows])
        queue = collections.deque(range(num_rows))
        prefix = jnp.asarray(plan.prefix)
        prefill_tokens = prefix.shape[0]
        free = np.arange(n)
        while True:
            if queue:
                take = [queue.popleft() for _ in range(min(len(free), len(queue)))]
                k = batching.bucket_size(len(take), minimum=MIN_ADMIT)
                rows_k = np.full((k,), num_rows, np.int32)  # padding entries: the scratch row
                slots_k = np.full((k,), n, np.int32)  # and no slot
                rows_k[: len(take)], slots_k[: len(take)] = take, free[: len(take)]
                unique = plan.source[rows_k.clip(max=num_rows - 1)]
                suffix = plan.suffixes[unique]
                pool = _admit(
                    state, pool, prefix, jnp.asarray(suffix),
                    jnp.asarray(plan.suffix_lengths[unique]),
                    jnp.asarray(rows_k), jnp.asarray(slots_k), options, eos, stop, **kw,
                )  # fmt: skip
                prefill_tokens += suffix.size
            refill_at = self.refill_at if queue else n
            pool = _decode(state, pool, jnp.int32(refill_at), options, eos, stop, **kw)
            free = np.nonzero(np.asarray(_free_slots(pool)))[0]
            if not queue and len(free) == n:
                break
        rows = jax.tree.map(lambda x: x[:num_rows], pool.rows)
        rollout = rollout_of(rows, options.prompt_len[:num_rows])
        steps = int(np.asarray(rollout.lengths).max()) - 1
        work = DecodeWork(
            prefill_tokens=jnp.int32(prefill_tokens),
            prefill_tokens_plain=jnp.int32(num_rows * prompt_bucket),
            decode_row_steps=pool.row_steps,
            decode_row_steps_plain=jnp.int32(num_rows * steps),
            decode_steps=pool.decode_steps,
        )
        return rollout, work

    def _empty_pool(self, prompt_tokens: np.ndarray) -> _Pool:
        """Every slot empty (pointing at the scratch row), every prompt's row unfinished."""
        c, n = self.config, self.num_slots
        num_rows, prompt_bucket = prompt_tokens.shape
        total = prompt_bucket + int(c.max_new_tokens)
        prompt_bt = np.full((num_rows + 1, prompt_bucket), c.pad_id, np.int32)
        prompt_bt[:num_rows] = prompt_tokens
        done = np.arange(num_rows + 1) == num_rows
        cache_dtype = None if c.cache_dtype is None else jnp.dtype(c.cache_dtype)
        cache: KVCache = kv_cache.allocate(
            self.model, n, total - 1, dtype=cache_dtype, shardings=self.cache_shardings
        )
        return _Pool(
            rows=initial_rows(jnp.asarray(prompt_bt), int(c.max_new_tokens), c.pad_id, done_b=done),
            slots=initial_slots(jnp.full((n,), num_rows, jnp.int32), cache, self._stop.shape[1]),
            row_steps=jnp.zeros((), jnp.int32),
            decode_steps=jnp.zeros((), jnp.int32),
        )
