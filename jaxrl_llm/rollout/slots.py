"""Continuous batching over decode slots: prefill one request, insert it into a slot, step all slots.

This is the step-at-a-time counterpart of `engine.generate` for serving, where requests arrive and
finish at different times. It uses the same `prefill`, `decode_step` and `sample_tokens`, so its
greedy output equals `generate`'s token for token. `JetStreamEngine` exposes it through
JetStream's engine API; it has no JetStream dependency itself.

    decoder = SlotDecoder(model, num_slots=8, max_length=512)
    state = decoder.init_state()
    prefix = decoder.prefill(params, padded_tokens, true_length)   # one request, [P] tokens
    state = decoder.insert(prefix, state, slot=3)
    state, step = decoder.generate(params, state)                  # one new token in every slot

A slot feeds its previous token at its position and samples the next one. `prefill` fills the
cache for the whole prompt and leaves the prompt's last token as the slot's first input, so every
`generate` call emits exactly one new token per slot (JetStream's orchestrator takes no token from
prefill). Slot s at its k-th generated token samples with `fold_in(key_s, k)`, where key_s is split
off the slot's previous key at each insert.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from jaxrl_llm.models.precision import merge_for_compute
from jaxrl_llm.models.transformer import KVCache, Transformer
from jaxrl_llm.rollout import kv_cache
from jaxrl_llm.rollout.decode_state import decode_step, prefill
from jaxrl_llm.rollout.sampling import sample_tokens, step_keys

Array = jax.Array


class Prefix(NamedTuple):
    """A prefilled request, ready to insert into a slot.

    Attributes:
      cache: `KVCache` with batch 1 and P slots (the padded prompt length).
      token: int32 [], the prompt's last token (the slot's first input).
      position: int32 [], its position, true_length - 1.
    """

    cache: KVCache
    token: Array
    position: Array


class SlotState(NamedTuple):
    """Decode state of all slots.

    Attributes:
      cache: `KVCache` [num_slots, K, max_length, H] per layer.
      tokens: int32 [num_slots], the next token to feed.
      positions: int32 [num_slots], its position.
      steps: int32 [num_slots], tokens generated since the slot's insert.
      keys: [num_slots] typed PRNG keys.
    """

    cache: KVCache
    tokens: Array
    positions: Array
    steps: Array
    keys: Array


class SlotStep(NamedTuple):
    """What one `generate` call produced for every slot.

    Attributes:
      tokens: int32 [num_slots], the sampled tokens.
      valid: bool [num_slots], False once a slot ran past `max_length` (its token is junk).
      lengths: int32 [num_slots], tokens generated in the slot including this one.
      logprobs, raw_logprobs: float32 [num_slots], as in `Rollout`.
    """

    tokens: Array
    valid: Array
    lengths: Array
    logprobs: Array
    raw_logprobs: Array


class SlotDecoder:
    """Prefill / insert / generate over `num_slots` decode slots of `max_length` positions.

    Args:
      model: the `Transformer` (its structure; parameters are passed to each call).
      num_slots: decode batch size.
      max_length: cache slots per sequence: prompt + generated tokens must fit.
      temperature, top_k, top_p, min_p: sampling for every slot (see `sampling`); 0 = greedy.
      seed: base of the per-slot keys.
      cache_dtype: KV cache dtype (default: the model dtype).
      cache_shardings: optional decode-cache layout, e.g. `CacheLayout(mesh, DECODE_RULES)`
        (any form `kv_cache.resolve` accepts).
    """

    def __init__(
        self,
        model: Transformer,
        *,
        num_slots: int,
        max_length: int,
        temperature: float = 0.0,
        top_k: int | None = None,
        top_p: float | None = None,
        min_p: float | None = None,
        seed: int = 0,
        cache_dtype=None,
        cache_shardings=None,
    ):
        if num_slots < 1 or max_length < 2:
            raise ValueError(f"SlotDecoder: {num_slots=} must be >= 1 and {max_length=} >= 2.")
        self.graphdef, _ = nnx.split(model)
        self.model = model  # its structure sizes the cache (`kv_cache.allocate`)
        self.model_config = model.config
        self.num_slots, self.max_length = num_slots, max_length
        self.temperature, self.top_k, self.top_p, self.min_p = temperature, top_k, top_p, min_p
        self.seed = seed
        self.cache_dtype = cache_dtype or model.config.jnp_dtype
        self.cache_shardings = cache_shardings

    def _model(self, params) -> Transformer:
        return merge_for_compute(self.graphdef, params)

    def init_state(self) -> SlotState:
        """Empty slots: zero cache, every slot parked at position 0."""
        n = self.num_slots
        cache = kv_cache.allocate(
            self.model, n, self.max_length, dtype=self.cache_dtype, shardings=self.cache_shardings
        )
        base = jax.random.key(self.seed)
        keys = jax.vmap(lambda s: jax.random.fold_in(base, s))(jnp.arange(n))
        # Three separate buffers: `insert` and `generate` donate the state, and a buffer may be
        # donated only once per call.
        tokens, positions, steps = (jnp.zeros((n,), jnp.int32) for _ in range(3))
        return SlotState(cache, tokens, positions, steps, keys)

    @functools.partial(jax.jit, static_argnums=(0,))
    def prefill(self, params, padded_tokens: Array, true_length: Array) -> Prefix:
        """Prefills one request.

        Args:
          params: the model's `nnx.State`.
          padded_tokens: int32 [P], the prompt right-padded (P <= max_length).
          true_length: int32 [], the prompt length (>= 1).

        Returns:
          `Prefix`.
        """
        model = self._model(params)
        p = padded_tokens.shape[0]
        cache = kv_cache.allocate_in_program(model, 1, p, dtype=self.cache_dtype)
        lengths = jnp.reshape(true_length, (1,)).astype(jnp.int32)
        _, cache = prefill(model, padded_tokens[None].astype(jnp.int32), lengths, cache)
        last = lengths[0] - 1
        return Prefix(cache, padded_tokens[last].astype(jnp.int32), last)

    @functools.partial(jax.jit, static_argnums=(0,), donate_argnames=("state",))
    def insert(self, prefix: Prefix, state: SlotState, slot: Array) -> SlotState:
        """Copies a prefilled request into `slot` (rows [slot, 0:P] of the cache); donates `state`."""
        cache = jax.tree.map(
            lambda big, small: jax.lax.dynamic_update_slice(
                big, small.astype(big.dtype), (slot, 0, 0, 0)
            ),
            state.cache,
            prefix.cache,
        )
        cache = kv_cache.constrain(cache, self.cache_shardings)
        new_key = jax.random.split(state.keys[slot])[0]
        return SlotState(
            cache=cache,
            tokens=state.tokens.at[slot].set(prefix.token),
            positions=state.positions.at[slot].set(prefix.position),
            steps=state.steps.at[slot].set(0),
            keys=state.keys.at[slot].set(new_key),
        )

    @functools.partial(jax.jit, static_argnums=(0,), donate_argnames=("state",))
    def generate(self, params, state: SlotState) -> tuple[SlotState, SlotStep]:
        """Samples one token in every slot; donates `state`."""
        model = self._model(params)
        n = self.num_slots
        positions = jnp.minimum(state.positions, self.max_length - 1)
        logits_bv, cache = decode_step(model, state.tokens, positions, state.cache)
        cache = kv_cache.constrain(cache, self.cache_shardings)

        def per_slot(value, default):
            return jnp.full((n,), default if value is None else value, jnp.float32)

        out = sample_tokens(
            step_keys(state.keys, state.steps),
            logits_bv,
            temperature_b=per_slot(self.temperature, 0.0),
            top_k=self.top_k,
            top_p_b=None if self.top_p is None else per_slot(self.top_p, 1.0),
            min_p_b=None if self.min_p is None else per_slot(self.min_p, 0.0),
        )
        step = SlotStep(
            tokens=out.tokens,
            valid=state.positions < self.max_length,
            lengths=state.steps + 1,
            logprobs=out.logprobs,
            raw_logprobs=out.raw_logprobs,
        )
        new_state = SlotState(
            cache=cache,
            tokens=out.tokens,
            positions=state.positions + 1,
            steps=state.steps + 1,
            keys=state.keys,
        )
        return new_state, step
