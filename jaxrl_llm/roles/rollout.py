"""The rollout role: the generator on its mesh, reading the actor's weights in the decode layout.

Each step the runner calls `sync(actor.params)`: `jaxrl_llm.sharding.reshard` lays the train-layout
parameters out by `DECODE_RULES` on the rollout mesh. Colocated, that is HybridFlow's train ->
decode reshard on the same devices (a no-op on one device); split, it is a device-to-device copy
to the rollout's own devices. `reshard` runs under `no_host_transfers()`, so a weight sync that
tried to pass through the host would raise. Between steps the decode copy is dropped
(`release`), so colocated runs do not keep two layouts alive through the train step.

With LoRA the base weights are laid out once, at the first sync, and every later sync moves only
the adapters. The worker then either folds them into a decode copy of the weights (`"merge"`,
W + scale * A B once per sync: decoding runs the base model's program) or decodes with the
adapters applied (`"apply"`: two thin matmuls more per projection and token, no merged copy);
experiments/benchmarks/lora_rollout.py measures both.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import Mesh

from jaxrl_llm.models.lora import (
    ROLLOUT_MODES,
    adapter_bytes,
    adapter_scale,
    has_adapters,
    merged_params,
    split_adapters,
    strip_adapters,
)
from jaxrl_llm.models.precision import compute_params
from jaxrl_llm.rollout import CacheLayout, DecodeWork, Rollout
from jaxrl_llm.rollout.chat import chat_generation_config, chat_generator
from jaxrl_llm.rollout.episodes import EpisodeDecoder
from jaxrl_llm.rollout.inflight import InflightRollout, WeightsSource, generate_inflight
from jaxrl_llm.rollout.types import concat_rollouts
from jaxrl_llm.sharding import DECODE_RULES, ReshardStats, Rules, param_shardings, reshard


class RolloutWorker:
    """Sampling (and greedy decoding) of chat prompts with the latest synced weights.

    Args:
      model: a `Transformer` of the policy's structure (its graph is used, not its weights).
      tokenizer: the policy's tokenizer (end-of-turn ids, pad id).
      mesh: the rollout mesh.
      max_new_tokens, temperature, min_prompt_bucket: the sampling options.
      rules: the decode layout (default `DECODE_RULES`).
      compaction, prefix_sharing: the engine's savings (`GenerationConfig`); `last_work` holds
        the `DecodeWork` of the latest `sample`.
      decode_attention: the decode steps' attention (`GenerationConfig.decode_attention`:
        "auto", "xla", "kernel", ...).
      lora_rollout: for a model with LoRA adapters, "merge" (decode with W + scale A B) or
        "apply" (decode with the adapters applied); see the module docstring.
      decode_batch: the most rows decoded at once (0: every prompt of a call in one program).
        A step's prompts are decoded in chunks of this many rows, one after another, each row
        with the key it has in the whole batch (the same samples as one call); what keeps a
        large step's KV cache within a chip's memory (`python -m jaxrl_llm.plan` picks it).

    Example:
      >>> worker = RolloutWorker(policy, tokenizer, placement.rollout_mesh, max_new_tokens=32,
      ...                        temperature=0.7)
      >>> stats = worker.sync(actor.params)
      >>> rollout = worker.sample(prompt_ids, seed=3)
    """

    def __init__(
        self,
        model,
        tokenizer,
        mesh: Mesh,
        *,
        max_new_tokens: int,
        temperature: float,
        min_prompt_bucket: int = 16,
        rules: Rules = DECODE_RULES,
        compaction: bool = True,
        prefix_sharing: str = "identical",
        lora_rollout: str = "apply",
        decode_batch: int = 0,
        decode_attention: str = "auto",
    ):
        if decode_batch < 0:
            raise ValueError(f"decode_batch={decode_batch} must be >= 0 (0: no chunking).")
        self.decode_batch = decode_batch
        if lora_rollout not in ROLLOUT_MODES:
            raise ValueError(f"lora_rollout={lora_rollout!r} must be one of {ROLLOUT_MODES}.")
        self.lora = has_adapters(model)
        self.lora_rollout = lora_rollout if self.lora else None
        self._policy = model  # the structure `compute_params` reads (adapters included)
        full = compute_params(model, nnx.state(model, nnx.Param))  # the decode dtype
        # What a sync sends once the rollout holds the base (what crosses to a split rollout
        # mesh): every weight, or with LoRA the adapters alone. Fixed by the model's shapes.
        self.sync_payload_bytes = (
            adapter_bytes(full) if self.lora else sum(x.nbytes for x in jax.tree.leaves(full))
        )
        if self.lora:
            full_shardings = param_shardings(full, mesh, rules)
            self._adapter_shardings, self._base_shardings = split_adapters(full_shardings)
            self._base: nnx.State | None = None  # the decode layout of the frozen base
            if lora_rollout == "merge":
                scale = adapter_scale(model)
                model = strip_adapters(model)
                self._merge = jax.jit(
                    lambda base, adapters: merged_params(nnx.merge_state(base, adapters), scale),
                    out_shardings=self._base_shardings,
                )
        self.decode_model = model  # the graph `params` fit (the base model when merging)
        self.shardings = param_shardings(nnx.state(model, nnx.Param), mesh, rules)
        cache = CacheLayout(mesh, rules) if mesh.devices.size > 1 else None
        options = dict(
            max_new_tokens=max_new_tokens,
            min_prompt_bucket=min_prompt_bucket,
            compaction=compaction,
            prefix_sharing=prefix_sharing,
            decode_attention=decode_attention,
        )
        self._sampler = chat_generator(
            model, tokenizer, temperature=temperature, cache_shardings=cache, **options
        )
        self._greedy = chat_generator(
            model, tokenizer, temperature=0.0, cache_shardings=cache, **options
        )
        self.params: nnx.State | None = None
        self.last_work: DecodeWork | None = None  # of the latest `sample`
        self._tokenizer, self._cache_layout = tokenizer, cache

    def episode_decoder(
        self, *, num_slots: int, max_length: int, temperature: float
    ) -> EpisodeDecoder:
        """An `EpisodeDecoder` (multi-turn episodes, `jaxrl_llm.envs`) of the decode graph: turns
        end at the tokenizer's end-of-turn ids; weights come from `sync` / `params=`."""
        config = chat_generation_config(self._tokenizer, max_new_tokens=1, temperature=temperature)
        return EpisodeDecoder(
            self.decode_model, config, num_slots=num_slots, max_length=max_length,
            cache_shardings=self._cache_layout,
        )  # fmt: skip

    def in_decode_dtype(self, actor_params: nnx.State) -> nnx.State:
        """`actor_params` as the decode copy holds them: a mixed-precision actor's float32
        master weights in the compute dtype (`jaxrl_llm.models.precision.compute_params`); any
        other state unchanged."""
        return compute_params(self._policy, actor_params)

    def sync(self, actor_params: nnx.State) -> ReshardStats:
        """Lays `actor_params` out in the decode layout on the rollout mesh (device to device).
        With LoRA only the adapters move (and the base, at the first sync). A mixed-precision
        actor's float32 master weights are cast to the compute dtype first: the decode copy is
        bfloat16, and half the bytes move."""
        actor_params = self.in_decode_dtype(actor_params)
        if self.lora:
            self.params, stats = self._lora_decode_params(actor_params, copy=False)
            return stats
        self.params, stats = reshard(actor_params, self.shardings, donate=False)
        return stats

    def _lora_decode_params(self, actor_params: nnx.State, *, copy: bool):
        """(decode-layout params, stats) of a LoRA actor's full state: the base is laid out at
        the first call and kept; the adapters are resharded (copied with `copy`, as the actor's
        step donates them) and merged or attached. Stats count the adapters' move (and the
        base's, the first time)."""
        start = time.perf_counter()
        adapters, base = split_adapters(actor_params)
        moved_base = None
        if self._base is None:
            self._base, moved_base = reshard(base, self._base_shardings, donate=False)
        adapters, stats = reshard(adapters, self._adapter_shardings, donate=False)
        if copy:
            adapters = jax.tree.map(jnp.copy, adapters)
        if self.lora_rollout == "merge":
            params = self._merge(self._base, adapters)
        else:
            params = nnx.merge_state(self._base, adapters)
        jax.block_until_ready(jax.tree.leaves(params))
        if moved_base is not None:
            stats = stats._replace(
                num_arrays=stats.num_arrays + moved_base.num_arrays,
                num_moved=stats.num_moved + moved_base.num_moved,
                bytes=stats.bytes + moved_base.bytes,
                device_bytes=stats.device_bytes + moved_base.device_bytes,
            )
        return params, stats._replace(seconds=time.perf_counter() - start)

    def snapshot(self, actor_params: nnx.State) -> tuple[nnx.State, ReshardStats]:
        """Like `sync`, but returns the decode-layout copy instead of keeping it, and never
        shares a buffer with `actor_params` (the actor's train step donates those): a weight
        version the asynchronous runner's generator may use while the actor trains on.

        The stats count every leaf written, moved or copied in place (`bytes`), and the
        seconds until the last one is ready.
        """
        start = time.perf_counter()
        in_place = {id(x) for x in jax.tree.leaves(actor_params)}  # the actor's buffers
        actor_params = self.in_decode_dtype(actor_params)
        if self.lora:
            params, stats = self._lora_decode_params(actor_params, copy=True)
            if self.lora_rollout == "apply":  # the base is shared, the adapters written
                written = adapter_bytes(params)
            else:  # the whole merged copy is written
                written = sum(x.nbytes for x in jax.tree.leaves(params))
            return params, stats._replace(bytes=written)
        params, stats = reshard(actor_params, self.shardings, donate=False)
        params = jax.tree.map(lambda x: jnp.copy(x) if id(x) in in_place else x, params)
        leaves = jax.block_until_ready(jax.tree.leaves(params))
        written = sum(x.nbytes for x in leaves)
        return params, stats._replace(bytes=written, seconds=time.perf_counter() - start)

    def release(self) -> None:
        """Drops the decode-layout copy (the actor keeps the train layout)."""
        self.params = None

    def _params(self, params: nnx.State | None) -> nnx.State:
        if params is not None:
            return params
        if self.params is None:
            raise RuntimeError("RolloutWorker: call sync(actor.params) before generating.")
        return self.params

    def sample(
        self, prompt_ids: Sequence[Sequence[int]], *, seed: int, params: nnx.State | None = None
    ) -> Rollout:
        """Sampled completions of token-id prompts (row b keyed by fold_in(key(seed), b)), with
        the synced weights or `params` (decode layout, e.g. from `snapshot`)."""
        rollout, self.last_work = self._chunked(
            self._sampler, prompt_ids, seed=seed, params=self._params(params)
        )
        return rollout

    def _chunked(self, generator, prompt_ids, *, seed: int, params) -> tuple[Rollout, DecodeWork]:
        """`generator.generate_with_work` over chunks of `decode_batch` rows, joined."""
        size = self.decode_batch or len(prompt_ids)
        if size >= len(prompt_ids):
            return generator.generate_with_work(prompt_ids, seed=seed, params=params)
        parts = [
            generator.generate_with_work(
                prompt_ids[start : start + size], seed=seed, params=params, row_offset=start
            )
            for start in range(0, len(prompt_ids), size)
        ]
        rollout = concat_rollouts([r for r, _ in parts], pad_id=generator.config.pad_id)
        work = jax.tree.map(lambda *xs: sum(xs), *[w for _, w in parts])
        return rollout, work

    def sample_inflight(
        self,
        prompt_ids: Sequence[Sequence[int]],
        *,
        seed: int,
        weights: WeightsSource,
        chunk_tokens: int,
    ) -> InflightRollout:
        """`sample`, taking the newest weights from `weights()` (version, decode-layout params)
        before every `chunk_tokens` decode steps (PipelineRL's in-flight updates,
        `jaxrl_llm.rollout.inflight`); each token is tagged with its version."""
        out = generate_inflight(
            self._sampler, prompt_ids, seed=seed, weights=weights, chunk_tokens=chunk_tokens
        )
        self.last_work = out.work
        return out

    def greedy(
        self, prompt_ids: Sequence[Sequence[int]], *, params: nnx.State | None = None
    ) -> Rollout:
        """Greedy (argmax) completions, e.g. ReMax's baseline."""
        return self._chunked(self._greedy, prompt_ids, seed=0, params=self._params(params))[0]
