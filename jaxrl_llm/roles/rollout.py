"""The rollout role: the generator on its mesh, reading the actor's weights in the decode layout.

Each step the runner calls `sync(actor.params)`: `jaxrl_llm.sharding.reshard` lays the train-layout
parameters out by `DECODE_RULES` on the rollout mesh. Colocated, that is HybridFlow's train ->
decode reshard on the same devices (a no-op on one device); split, it is a device-to-device copy
to the rollout's own devices. `reshard` runs under `no_host_transfers()`, so a weight sync that
tried to pass through the host would raise. Between steps the decode copy is dropped
(`release`), so colocated runs do not keep two layouts alive through the train step.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import Mesh

from jaxrl_llm.rollout import CacheLayout, DecodeWork, Rollout
from jaxrl_llm.rollout.chat import chat_generator
from jaxrl_llm.rollout.inflight import InflightRollout, WeightsSource, generate_inflight
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
    ):
        self.shardings = param_shardings(nnx.state(model, nnx.Param), mesh, rules)
        cache = CacheLayout(mesh, rules) if mesh.devices.size > 1 else None
        options = dict(
            max_new_tokens=max_new_tokens,
            min_prompt_bucket=min_prompt_bucket,
            compaction=compaction,
            prefix_sharing=prefix_sharing,
        )
        self._sampler = chat_generator(
            model, tokenizer, temperature=temperature, cache_shardings=cache, **options
        )
        self._greedy = chat_generator(
            model, tokenizer, temperature=0.0, cache_shardings=cache, **options
        )
        self.params: nnx.State | None = None
        self.last_work: DecodeWork | None = None  # of the latest `sample`

    def sync(self, actor_params: nnx.State) -> ReshardStats:
        """Lays `actor_params` out in the decode layout on the rollout mesh (device to device)."""
        self.params, stats = reshard(actor_params, self.shardings, donate=False)
        return stats

    def snapshot(self, actor_params: nnx.State) -> tuple[nnx.State, ReshardStats]:
        """Like `sync`, but returns the decode-layout copy instead of keeping it, and never
        shares a buffer with `actor_params` (the actor's train step donates those): a weight
        version the asynchronous runner's generator may use while the actor trains on.

        The stats count every leaf written, moved or copied in place (`bytes`), and the
        seconds until the last one is ready.
        """
        start = time.perf_counter()
        params, stats = reshard(actor_params, self.shardings, donate=False)
        in_place = {id(x) for x in jax.tree.leaves(actor_params)}
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
        rollout, self.last_work = self._sampler.generate_with_work(
            prompt_ids, seed=seed, params=self._params(params)
        )
        return rollout

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
        return self._greedy(prompt_ids, seed=0, params=self._params(params))
