"""In-flight weight updates: a rollout that switches to newer weights between decode chunks.

PipelineRL ("PipelineRL: Faster On-policy Reinforcement Learning for Long Sequence Generation",
Piché et al. 2025, 2509.19128) lets the generator take the learner's newest weights in the
middle of a batch: the decode pauses between two steps, swaps its parameters and goes on with the
KV cache it has (computed by the older weights), so no sequence waits for the slowest one of its
batch before it sees an update. Each token is then sampled by a known weight version, and its
log-prob (`Rollout.logprobs`) is the behaviour log-prob of that version, which the off-policy
corrections use as they are (`jaxrl_llm.algorithms.off_policy`).

    out = generate_inflight(generator, prompts, seed=0, weights=source, chunk_tokens=16)
    out.rollout                 # as Generator.generate_with_work
    out.versions_bt             # int32 [B, T]: the weight version that sampled each token

The same prefill, decode step and compaction as `engine.Generator` run as separate jitted
programs (prefill, a chunk of at most `chunk_tokens` decode steps, a compaction, the result), and
the host asks `weights()` for the newest parameters before every chunk. Parameters are program
arguments, so a switch costs no compile. With one weight version throughout, the result equals
`Generator.generate_with_work`'s token for token (tested); a host sync between chunks is the
price of switching.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import numpy as np
from flax import nnx

from jaxrl_llm.models.precision import merge_for_compute
from jaxrl_llm.rollout.decode_state import (
    DecodeWork,
    PaddedInputs,
    compact,
    decode_until,
    live_rows,
)
from jaxrl_llm.rollout.engine import Generator, finish_decode, start_decode
from jaxrl_llm.rollout.types import Rollout

# Returns (version, params in the generator's layout): the newest weights to decode with.
WeightsSource = Callable[[], tuple[int, Any]]

_STATIC = ("graphdef", "static", "cache_shardings")


class InflightRollout(NamedTuple):
    """A rollout whose tokens may come from several weight versions.

    Attributes:
      rollout: the `Rollout` (B rows, T = prompt bucket + max_new_tokens columns).
      work: its `DecodeWork`.
      versions_bt: int32 [B, T] numpy, the version that sampled each completion token (-1 at
        prompt and padding columns); non-decreasing along each row.
      step_versions: int32 [N] numpy, the version that sampled decode step j (-1 after the last).
      switches: how many times the weights changed during the rollout.
    """

    rollout: Rollout
    work: DecodeWork
    versions_bt: np.ndarray
    step_versions: np.ndarray
    switches: int


@functools.partial(jax.jit, static_argnames=_STATIC)
def _start(params, inputs: PaddedInputs, *, graphdef, static, cache_shardings):
    model = merge_for_compute(graphdef, params)
    return start_decode(model, inputs, static=static, cache_shardings=cache_shardings)


@functools.partial(jax.jit, static_argnames=_STATIC, donate_argnames=("state",))
def _chunk(params, state, inputs, until, next_size, *, graphdef, static, cache_shardings):
    model = merge_for_compute(graphdef, params)
    return decode_until(
        model,
        state,
        inputs,
        until=until,
        next_size=next_size,
        static=static,
        cache_shardings=cache_shardings,
    )


@functools.partial(jax.jit, static_argnames=("size", "cache_shardings", "shards"))
def _compact(state, *, size, cache_shardings, shards):
    return compact(state, size, cache_shardings, shards)


@functools.partial(jax.jit, static_argnames=("shards",))
def _progress(state, shards):
    return state.step, live_rows(state, shards)


_finish = jax.jit(finish_decode)


def token_versions(step_versions: np.ndarray, rollout: Rollout) -> np.ndarray:
    """int32 [B, T]: `step_versions[j]` at each row's completion token j, -1 elsewhere."""
    mask = np.asarray(rollout.completion_mask)
    prompt_len = np.asarray(rollout.prompt_lengths)
    step_bt = np.arange(mask.shape[1])[None, :] - prompt_len[:, None]
    step_bt = np.clip(step_bt, 0, len(step_versions) - 1)
    return np.where(mask, step_versions[step_bt], -1).astype(np.int32)


def generate_inflight(
    generator: Generator,
    prompts: Sequence[Sequence[int]],
    *,
    seed: int | Sequence[int],
    weights: WeightsSource,
    chunk_tokens: int,
    max_new_tokens: Sequence[int] | None = None,
) -> InflightRollout:
    """Samples completions like `generator.generate_with_work`, taking the newest weights from
    `weights()` before the prefill and before every chunk of `chunk_tokens` decode steps.

    Args:
      generator: the `Generator` (model structure, `GenerationConfig`, cache layout).
      prompts, seed, max_new_tokens: as `Generator.__call__`.
      weights: returns (version, params); called once per chunk from this thread.
      chunk_tokens: decode steps between two weight checks (>= 1).

    Returns:
      `InflightRollout`.
    """
    if chunk_tokens < 1:
        raise ValueError(f"generate_inflight: chunk_tokens={chunk_tokens} must be >= 1.")
    inputs, batch, copies_rows = generator.padded_inputs(prompts, seed, max_new_tokens)
    padded = inputs.prompt_bt.shape[0]
    static = generator.program_options(padded, copies_rows=copies_rows)
    stages = static.stages
    programs = dict(
        graphdef=nnx.graphdef(generator.model),
        static=static,
        cache_shardings=generator.cache_shardings,
    )
    n = static.max_new_tokens
    step_versions = np.full((n,), -1, np.int32)

    version, params = weights()
    state = _start(params, inputs, **programs)
    step_versions[0] = version
    shards = static.shards
    step, live = (int(x) for x in jax.device_get(_progress(state, shards)))
    stage, switches = 0, 0
    while step < n and live > 0:
        next_size = stages[stage + 1] if stage + 1 < len(stages) else 0
        if live <= next_size // shards:  # live: the fullest row shard's
            stage += 1
            state = _compact(state, size=stages[stage], cache_shardings=generator.cache_shardings,
                             shards=shards)  # fmt: skip
            continue
        new_version, params = weights()
        switches += int(new_version != version)
        version = new_version
        until = min(step + chunk_tokens, n)
        state = _chunk(params, state, inputs, until, next_size, **programs)
        new_step, live = (int(x) for x in jax.device_get(_progress(state, shards)))
        step_versions[step:new_step] = version
        step = new_step
    del params
    rollout, work = _finish(state, inputs)
    if padded != batch:
        rollout = Rollout(*(x[:batch] for x in rollout))
    rollout = jax.device_get(rollout)
    return InflightRollout(
        rollout, work, token_versions(step_versions, rollout), step_versions, switches
    )
