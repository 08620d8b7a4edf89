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
     row into [B, T] arrays, so compaction never changes the layout. With the rows split over
     several devices (`CacheLayout` over a data axis), each device compacts its own rows
     (`decode_state.compact`): a stage ends when every device's live rows fit its share.
     Each step's attention is `GenerationConfig.decode_attention` (`attention_choice`): on
     TPU and GPU a Pallas kernel that reads only each row's filled cache blocks (the cache is
     then padded to whole blocks), else the masked full-cache XLA path.

Parameters enter the program as arguments (never baked-in constants), so the same executable
serves every weight update, and the computation follows their sharding: params sharded by the
decode rule set run tensor-parallel. The KV cache is created inside the program
(`kv_cache.allocate_in_program`); pass `cache_shardings=CacheLayout(mesh, DECODE_RULES)` to
constrain its layout. The decode state and its step functions live in `decode_state`.

Reproducibility: row b samples step j with `fold_in(fold_in(key(seed), b), j)` (or a per-row
seed), so a prompt's completion does not depend on the rest of the batch, nor on which slot of
which stage it decodes in. `DecodeWork` reports the prefill positions and decode row-steps
computed against the plain engine's (every row prefilled in full, the batch never shrunk).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxrl_llm.models.config import ModelConfig
from jaxrl_llm.models.precision import merge_for_compute
from jaxrl_llm.models.transformer import Transformer
from jaxrl_llm.rollout import attention_choice, batching, kv_cache
from jaxrl_llm.rollout.decode_state import (
    DecodeStatic,
    DecodeWork,
    LoopState,
    PaddedInputs,
    RowOptions,
    compact,
    compaction_stages,
    decode_until,
    initial_rows,
    initial_slots,
    per_row_values,
    record_step,
    rollout_of,
    shared_prefill,
)
from jaxrl_llm.rollout.generation_config import GenerationConfig
from jaxrl_llm.rollout.prefix_sharing import plan_prefill
from jaxrl_llm.rollout.sampling import sequence_keys
from jaxrl_llm.rollout.types import Rollout
from kernels.decode_attention import padded_slots

Array = jax.Array

# Incremented each time the decode program is traced (a Python side effect that runs only while
# tracing); tests read it through `trace_count()` to prove that a repeated call reuses the program.
_TRACES = {"generate": 0}


def trace_count() -> int:
    """How many times the generate program has been traced in this process (all shapes)."""
    return _TRACES["generate"]


def start_decode(
    model: Transformer, inputs: PaddedInputs, *, static: DecodeStatic, cache_shardings
) -> LoopState:
    """Prefill and the first sampled token: the decode state at step 1, first stage's slots."""
    batch, prompt_bucket = inputs.prompt_bt.shape
    n_new = static.max_new_tokens
    cache_dtype = None if static.cache_dtype is None else jnp.dtype(static.cache_dtype)
    # Prefill into a P-slot cache (its attention then spans P keys, not P + N), then extend it
    # with zero slots: the last sampled token is never fed back, so P + N - 1 slots suffice
    # (a decode attention kernel tiles whole blocks: rounded up, the padding never read).
    logits_bv, cache = shared_prefill(
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
        logits_bv, cache = (
            jnp.take(logits_bv, source_b, axis=0),
            kv_cache.take_rows(cache, source_b),
        )
        cache = kv_cache.constrain(cache, cache_shardings)
    slots = padded_slots(prompt_bucket + n_new - 1, static.attention)
    cache = kv_cache.constrain(kv_cache.extend(cache, slots - prompt_bucket), cache_shardings)
    init = LoopState(
        step=jnp.zeros((), jnp.int32),
        rows=initial_rows(inputs.prompt_bt, n_new, static.pad_id, done_b=~inputs.active_b),
        slots=initial_slots(jnp.arange(batch, dtype=jnp.int32), cache, inputs.stop_sw.shape[1]),
        row_steps=jnp.zeros((), jnp.int32),
    )
    return record_step(init, logits_bv, inputs, static)


def finish_decode(s: LoopState, inputs: PaddedInputs) -> tuple[Rollout, DecodeWork]:
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
def _generate_padded(
    state, inputs: PaddedInputs, *, graphdef, static: DecodeStatic, cache_shardings
):
    _TRACES["generate"] += 1
    model = merge_for_compute(graphdef, state)  # cast once per rollout, not per token
    s = start_decode(model, inputs, static=static, cache_shardings=cache_shardings)
    # Compaction: stage i decodes a batch of stages[i] slots until its live rows fit the next
    # stage, then the live rows are gathered into the smaller batch.
    for i, size in enumerate(static.stages):
        if i > 0:
            s = compact(s, size, cache_shardings, static.shards)
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


def decode_options(
    config: GenerationConfig,
    model_config: ModelConfig,
    cache_shardings,
    padded: int,
    *,
    copies_rows: bool,
    stages: tuple[int, ...] | None = None,
) -> DecodeStatic:
    """The static options of a decode program of `padded` rows: its compaction stages (default
    from the config; with the rows split over several devices by the cache layout, each device
    compacts its own rows), row shards and decode attention (`attention_choice.resolve`).
    What the planner's cost model reads (`jaxrl_llm.scale`) as the program runs it."""
    c = config
    attention, interpret = attention_choice.resolve(
        c.decode_attention, head_dim=model_config.head_dim,
        cache_dtype=c.cache_dtype or model_config.jnp_dtype, cache_shardings=cache_shardings,
    )  # fmt: skip
    shards = kv_cache.row_shards(cache_shardings, padded)
    if stages is None:
        stages = compaction_stages(
            padded, enabled=c.compaction, min_batch=c.min_compact_batch, shards=shards
        )
    return DecodeStatic(
        max_new_tokens=int(c.max_new_tokens),
        top_k=c.top_k,
        use_top_p=c.top_p is not None,
        use_min_p=c.min_p is not None,
        pad_id=int(c.pad_id),
        cache_dtype=c.cache_dtype,
        stages=stages,
        copies_rows=copies_rows,
        shards=shards if len(stages) > 1 else 1,
        attention=attention,
        interpret=interpret,
    )


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
        graphdef, state = nnx.split(self.model)
        if params is not None:
            state = params
        out, work = _generate_padded(
            state,
            inputs,
            graphdef=graphdef,
            static=self.program_options(padded, copies_rows=copies_rows),
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
        return _generate_padded.lower(
            params,
            inputs,
            graphdef=nnx.graphdef(self.model),
            static=self.program_options(inputs.prompt_bt.shape[0], copies_rows=copies_rows),
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

    def program_options(
        self, padded: int, *, copies_rows: bool, stages: tuple[int, ...] | None = None
    ) -> DecodeStatic:
        """`decode_options` of a decode program of `padded` rows for this generator."""
        return decode_options(
            self.config, self.model.config, self.cache_shardings, padded,
            copies_rows=copies_rows, stages=stages,
        )  # fmt: skip

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
            temperature=jnp.asarray(per_row_values(c.temperature, batch, padded, 1.0)),
            top_p=jnp.asarray(per_row_values(c.top_p, batch, padded, 1.0)),
            min_p=jnp.asarray(per_row_values(c.min_p, batch, padded, 0.0)),
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
