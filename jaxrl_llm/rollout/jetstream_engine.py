"""`JetStreamEngine`: our model and KV cache behind `jetstream.engine.engine_api.Engine`.

Needs the `jetstream` extra (`pip install 'jaxrl_llm[jetstream]'`; google-jetstream pulls
TensorFlow through seqio, about 2 GB). Import it as `jaxrl_llm.rollout.JetStreamEngine`; nothing
else in the package imports JetStream.

    engine = JetStreamEngine(model, tokenizer, max_concurrent_decodes=8, max_prefill_length=64,
                             max_target_length=192)
    params = engine.load_params()
    driver = orchestrator.Driver(prefill_engines=[engine], generate_engines=[engine],
                                 prefill_params=[params], generate_params=[params],
                                 interleaved_mode=True)

The work is done by `SlotDecoder` (same prefill, decode step and sampler as `generate`). JetStream
types map as follows: Params = the model's `nnx.State`; Prefix = `slots.Prefix`; DecodeState =
`slots.SlotState`; `generate` returns `ResultTokens` whose data is [slots, 3] = (token, valid,
length) with `samples_per_slot` 1.

Tokenizer: the orchestrator builds it through `build_tokenizer`, which here wraps our `Tokenizer`.
It ignores JetStream's `is_bos` request (pass `add_bos=True` to prepend the tokenizer's BOS token),
and `stop_tokens` are the EOS ids only (JetStream's default also stops on the pad id).
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
from flax import nnx
from jetstream.engine import engine_api, token_utils, tokenizer_api, tokenizer_pb2

from jaxrl_llm.models.tokenizer import Tokenizer
from jaxrl_llm.models.transformer import Transformer
from jaxrl_llm.rollout.slots import Prefix, SlotDecoder, SlotState


class JetStreamTokenizer(tokenizer_api.Tokenizer):
    """JetStream's tokenizer interface over a `jaxrl_llm.models.Tokenizer`.

    Args:
      tokenizer: our tokenizer.
      eos_ids: ids that end a request (JetStream's `stop_tokens`).
      pad_id: filler of padded prompts.
      max_prefill_length: longest padded prompt.
      add_bos: prepend the tokenizer's BOS token to every prompt.
    """

    def __init__(
        self,
        tokenizer: Tokenizer,
        *,
        eos_ids: tuple[int, ...],
        pad_id: int,
        max_prefill_length: int,
        add_bos: bool = False,
    ):
        self.tokenizer = tokenizer
        self._eos_ids, self._pad_id = tuple(eos_ids), pad_id
        self.max_prefill_length, self.add_bos = max_prefill_length, add_bos

    def encode(self, s: str, **kwargs):
        """(padded ids [P], true length); P is JetStream's bucket (16, 32, ... max_prefill_length)."""
        ids = self.tokenizer.encode(s)
        if self.add_bos and self.tokenizer.bos_token is not None:
            ids = [self.tokenizer.backend.token_to_id(self.tokenizer.bos_token)] + ids
        return token_utils.pad_tokens(
            np.asarray(ids, np.int32),
            self.bos_id,
            self.pad_id,
            is_bos=False,
            max_prefill_length=kwargs.get("max_prefill_length") or self.max_prefill_length,
            jax_padding=kwargs.get("jax_padding", True),
        )

    def decode(self, token_ids: list[int], **kwargs) -> str:
        """Text of `token_ids`."""
        return self.tokenizer.decode(token_ids)

    @property
    def pad_id(self) -> int:
        """The pad id."""
        return self._pad_id

    @property
    def eos_id(self) -> int:
        """The first EOS id (-1 when there is none)."""
        return self._eos_ids[0] if self._eos_ids else -1

    @property
    def bos_id(self) -> int:
        """The BOS id, or the pad id when the tokenizer has no BOS token."""
        bos = self.tokenizer.bos_token
        return self._pad_id if bos is None else self.tokenizer.backend.token_to_id(bos)

    @property
    def stop_tokens(self) -> set[int]:
        """The EOS ids (not the pad id: pad may be an ordinary token)."""
        return set(self._eos_ids)


class JetStreamEngine(engine_api.Engine):
    """A JetStream `Engine` over a `Transformer`, with continuous batching over decode slots.

    Args:
      model: the `Transformer`.
      tokenizer: our `Tokenizer` (for text requests), or None for token-id requests only.
      max_concurrent_decodes: number of decode slots.
      max_prefill_length: longest padded prompt; a power of two >= 16 (JetStream's buckets).
      max_target_length: cache positions per slot: prompt + generated tokens must fit.
      temperature, top_k, top_p, min_p, seed: sampling of every request (0 = greedy).
      eos_ids: stop ids; None uses the model config's `eos_token_id`.
      pad_id: prompt filler.
      mesh: the mesh the engine runs on; default: one device.
      cache_shardings: optional decode-cache sharding (see `SlotDecoder`).
      add_bos: see `JetStreamTokenizer`.
    """

    def __init__(
        self,
        model: Transformer,
        tokenizer: Tokenizer | None = None,
        *,
        max_concurrent_decodes: int = 8,
        max_prefill_length: int = 256,
        max_target_length: int = 512,
        temperature: float = 0.0,
        top_k: int | None = None,
        top_p: float | None = None,
        min_p: float | None = None,
        seed: int = 0,
        eos_ids: tuple[int, ...] | None = None,
        pad_id: int = 0,
        mesh: jax.sharding.Mesh | None = None,
        cache_shardings=None,
        add_bos: bool = False,
    ):
        if max_prefill_length > max_target_length:
            raise ValueError(
                f"JetStreamEngine: {max_prefill_length=} must be <= {max_target_length=}."
            )
        self._model = model
        self._tokenizer = tokenizer
        self._decoder = SlotDecoder(
            model,
            num_slots=max_concurrent_decodes,
            max_length=max_target_length,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            min_p=min_p,
            seed=seed,
            cache_shardings=cache_shardings,
        )
        if eos_ids is None:
            eos = model.config.eos_token_id
            eos_ids = () if eos is None else (eos,)
        self._eos_ids, self._pad_id, self._add_bos = tuple(eos_ids), pad_id, add_bos
        self._max_prefill_length = max_prefill_length
        self._mesh = mesh or jax.sharding.Mesh(np.asarray(jax.devices()[:1]), ("x",))

    # --- parameters and tokenizer -------------------------------------------------------------
    def load_params(self, *args, **kwargs) -> nnx.State:
        """The model's current parameters (an `nnx.State`, sharded as the model is)."""
        return nnx.state(self._model)

    def get_tokenizer(self) -> tokenizer_pb2.TokenizerParameters:
        """Placeholder parameters; `build_tokenizer` returns our tokenizer regardless."""
        return tokenizer_pb2.TokenizerParameters(path="jaxrl_llm", extra_ids=0)

    def build_tokenizer(self, metadata: tokenizer_pb2.TokenizerParameters) -> JetStreamTokenizer:
        """A `JetStreamTokenizer` over the engine's tokenizer."""
        del metadata
        if self._tokenizer is None:
            raise ValueError("JetStreamEngine was built without a tokenizer; pass one.")
        return JetStreamTokenizer(
            self._tokenizer,
            eos_ids=self._eos_ids,
            pad_id=self._pad_id,
            max_prefill_length=self._max_prefill_length,
            add_bos=self._add_bos,
        )

    # --- the three device steps ---------------------------------------------------------------
    def prefill(
        self,
        *,
        params: nnx.State,
        existing_prefix: Prefix | None = None,
        padded_tokens: jax.Array,
        true_length: int,
    ) -> Prefix:
        """Prefills one request (`padded_tokens` [P]); prefix caching is not supported."""
        if existing_prefix is not None:
            raise NotImplementedError("JetStreamEngine: existing_prefix (prefix caching).")
        return self._decoder.prefill(params, padded_tokens, np.int32(true_length))

    def insert(self, prefix: Prefix, decode_state: SlotState, slot: int) -> SlotState:
        """Places a prefilled request into decode slot `slot` (donates `decode_state`)."""
        return self._decoder.insert(prefix, decode_state, np.int32(slot))

    def generate(
        self, params: nnx.State, decode_state: SlotState
    ) -> tuple[SlotState, engine_api.ResultTokens]:
        """One new token in every slot, packed as (token, valid, length) columns."""
        decode_state, step = self._decoder.generate(params, decode_state)
        data = jax.numpy.stack(
            [step.tokens, step.valid.astype(np.int32), step.lengths], axis=1
        ).astype(np.int32)
        return decode_state, engine_api.ResultTokens(
            data=data, tokens_idx=(0, 1), valid_idx=(1, 2), length_idx=(2, 3), samples_per_slot=1
        )

    def init_decode_state(self, *args, **kwargs) -> SlotState:
        """Empty decode slots."""
        return self._decoder.init_state()

    def get_prefix_destination_sharding(self) -> Any:
        """Prefixes are replicated over the engine's mesh."""
        return jax.sharding.NamedSharding(self._mesh, jax.sharding.PartitionSpec())

    # --- properties ---------------------------------------------------------------------------
    @property
    def max_concurrent_decodes(self) -> int:
        """Number of decode slots."""
        return self._decoder.num_slots

    @property
    def samples_per_slot(self) -> int:
        """One sample per slot."""
        return 1

    @property
    def max_prefill_length(self) -> int:
        """Longest padded prompt."""
        return self._max_prefill_length

    @property
    def mesh(self) -> jax.sharding.Mesh:
        """The mesh the engine runs on."""
        return self._mesh

    @property
    def colocated_cpus(self) -> None:
        """No colocated CPU devices are used."""
        return None
