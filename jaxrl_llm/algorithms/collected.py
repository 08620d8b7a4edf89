"""Collected fields: per-sample data an algorithm asks the run's collector for, served by a
function its own module registers, so that a new field needs no runner edit.

An algorithm lists what it needs beside the samples as requests in `Algorithm.collects`. The
built-in requests (`GreedyBaseline`, `GoldReferences`) are served by the single-turn sampler into
their own `Experience` fields. Any other request type is served through this registry:

    @dataclasses.dataclass(frozen=True)
    class AnswerTokens:                       # the request: a small frozen dataclass
        '''Each sample's gold answer length in tokens.'''

    def serve_answer_tokens(request, context: CollectContext) -> np.ndarray:     # int32 [B]
        lengths_p = [len(context.tokenizer.encode(e.answer)) for e in context.examples]
        return context.per_sample(np.asarray(lengths_p, np.int32))

    register_collected(AnswerTokens, serve_answer_tokens, name="answer_tokens")

and the algorithm reads `experience.collected["answer_tokens"]` in its `make_batch`. Every
collector (the single-turn sampler and the episode player) calls the server once per sampling
round with a `CollectContext` of that round, after the samples are scored; the value must have one
row per sample, [B, ...] (row b belongs to row b of the rollout), so dynamic sampling can keep
the rows of the groups it picks. A collector that finds no server for a request refuses the
algorithm in one line before the model loads (`check_served`).

Servers and registrations run on the host, in every process that collects (a module loaded with
`--import` registers in each). The registry is global: register at import, once per field.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

import numpy as np

from jaxrl_llm.algorithms.base import BUILT_IN_REQUESTS

__all__ = [
    "CollectContext",
    "CollectedField",
    "check_served",
    "collected_fields",
    "register_collected",
    "serve_collected",
    "server_of",
]


class CollectContext(NamedTuple):
    """What a server may read: one sampling round of one RL step, on the host (numpy).

    P prompts, G samples each, B = P * G rows; rows p*G .. p*G + G - 1 are prompt p's. Servers
    must not change what they are given.

    Attributes:
      config: the run config.
      examples: [P] the round's `Example`s (question, answer, source, metadata columns).
      group_size: G.
      rollout: the round's `Rollout` [B, T]: tokens, completion_mask, logprobs, raw_logprobs,
        prompt_lengths [B], lengths [B], finish_reason [B] (episodes: the whole episode's
        tokens, `completion_mask` at model tokens).
      completions: [B] completion texts (episodes: the transcript as text).
      rewards: float32 [B] the total reward of each sample.
      tokenizer: the run's `Tokenizer`.
      prompt_texts: [P] chat-formatted prompt texts; None for episodes.
      prompt_ids: [P] prompt token ids (a row's prompt is `rollout.tokens[b,
        :rollout.prompt_lengths[b]]`); None for episodes.
      greedy: `(prompt_ids [N] lists of ids) -> Rollout`, greedy completions with the round's
        weights (one more decode); None for episodes.
      score: `(prompt_texts [N], completions [N], examples [N]) -> RewardOutput`, the reward
        role (functions, models, judges) on any texts; None for episodes.
      episodes: the `EpisodeBatch` of multi-turn episodes (turns, rewards per turn, infos);
        None for single-turn samples.
    """

    config: Any
    examples: list
    group_size: int
    rollout: Any
    completions: list[str]
    rewards: np.ndarray
    tokenizer: Any
    prompt_texts: list[str] | None = None
    prompt_ids: list[list[int]] | None = None
    greedy: Callable[[list[list[int]]], Any] | None = None
    score: Callable[[list[str], list[str], list], Any] | None = None
    episodes: Any = None

    @property
    def num_samples(self) -> int:
        """B, the rows of the round's rollout."""
        return len(self.completions)

    def per_sample(self, values_p) -> np.ndarray:
        """Per-prompt values [P, ...] repeated for each of a prompt's G samples: [B, ...].

        Example:
          >>> context.per_sample(np.array([3, 5]))  # G = 2
          array([3, 3, 5, 5])
        """
        return np.repeat(np.asarray(values_p), self.group_size, axis=0)


class CollectedField(NamedTuple):
    """A registered server: requests of `request_type` fill `Experience.collected[name]`.

    Attributes:
      name: the key in `Experience.collected` (a Python identifier).
      request_type: the request's class (instances go in `Algorithm.collects`).
      serve: `(request, CollectContext) -> values [B, ...]`, one row per sample (an array, or a
        list numpy makes one of).
    """

    name: str
    request_type: type
    serve: Callable[[Any, CollectContext], Any]


_FIELDS: dict[str, CollectedField] = {}


def _qualname(kind: type) -> str:
    return f"{kind.__module__}.{kind.__qualname__}"


def register_collected(
    request_type: type,
    serve: Callable[[Any, CollectContext], Any],
    *,
    name: str,
    replace: bool = False,
) -> CollectedField:
    """Registers `serve` as the server of `request_type`, whose values land in
    `Experience.collected[name]`.

    Registering the same definition again (a module or notebook cell run twice: a class of
    the same module and name) replaces it. Anything else that would take a registered name
    or request type is refused unless `replace=True`, which replaces the old entry.

    Args:
      request_type: the request's class (a frozen dataclass, so requests compare by value).
      serve: `(request, CollectContext) -> [B, ...]` values, one row per sample.
      name: the field's key in `Experience.collected`.
      replace: replace an entry of another definition holding `name` or `request_type`.

    Returns:
      The `CollectedField`.

    Raises:
      ValueError: a built-in request type, a bad name, or a taken name or type without
        `replace=True`.

    Example:
      >>> register_collected(AnswerTokens, serve_answer_tokens, name="answer_tokens")
    """
    if not isinstance(request_type, type):
        raise ValueError(f"register_collected: request_type={request_type!r} must be a class.")
    if request_type in BUILT_IN_REQUESTS:
        raise ValueError(
            f"register_collected: {request_type.__name__} is a built-in request, served by the "
            "single-turn sampler into its own Experience field; define a new request class."
        )
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"register_collected: name={name!r} must be a Python identifier.")
    if not callable(serve):
        raise ValueError(f"register_collected: serve={serve!r} must be callable.")
    taken = [f for f in _FIELDS.values() if f.name == name or f.request_type is request_type]
    for old in taken:
        same = old.name == name and _qualname(old.request_type) == _qualname(request_type)
        if not (same or replace):
            raise ValueError(
                f"register_collected({request_type.__name__}, name={name!r}): collected field "
                f"{old.name!r} is already served for {_qualname(old.request_type)}; pass "
                "replace=True to replace it, or choose another name."
            )
    for old in taken:
        del _FIELDS[old.name]
    field = CollectedField(name, request_type, serve)
    _FIELDS[name] = field
    return field


def server_of(request_type: type) -> CollectedField | None:
    """The registered field of `request_type`, or None."""
    return next((f for f in _FIELDS.values() if f.request_type is request_type), None)


def collected_fields() -> dict[str, CollectedField]:
    """Every registered field, by name (a copy)."""
    return dict(_FIELDS)


def serve_collected(requests: Iterable[Any], context: CollectContext) -> dict[str, np.ndarray]:
    """The values of the registered requests among `requests`, by field name (the others,
    built-in requests, are the collector's own to serve).

    Returns:
      {name: array [B, ...]}, B = `context.num_samples`.

    Raises:
      ValueError: a server returned no row per sample, or two requests fill one name.
    """
    served: dict[str, np.ndarray] = {}
    for request in requests:
        field = server_of(type(request))
        if field is None:
            continue
        if field.name in served:
            raise ValueError(
                f"Algorithm.collects asks twice for collected field {field.name!r} "
                f"({request!r}); keep one request per field."
            )
        values = np.asarray(field.serve(request, context))
        if values.ndim == 0 or values.shape[0] != context.num_samples:
            raise ValueError(
                f"the server of collected field {field.name!r} ({request!r}) returned shape "
                f"{values.shape}; it must return one row per sample: [B={context.num_samples}, "
                "...] (context.per_sample repeats per-prompt values)."
            )
        served[field.name] = values
    return served


def check_served(
    algorithm,
    served: Iterable[type],
    *,
    collector: str,
    fix: str = "",
) -> None:
    """Raises ValueError, in one line, for the first request of `algorithm.collects` that
    neither the collector's built-in servers (`served`) nor a registered server covers.

    Args:
      algorithm: the run's `Algorithm`.
      served: the request types the collector serves itself.
      collector: the collector, for the message ("the episode player (multi-turn episodes)").
      fix: what to do instead when a built-in request is not served here.
    """
    served = tuple(served)
    for request in algorithm.collects:
        kind = type(request)
        if kind in served or server_of(kind) is not None:
            continue
        if kind in BUILT_IN_REQUESTS:
            how = fix or "it is served by the single-turn sampler only"
        else:
            how = (
                f"no server is registered for {kind.__name__}: call jaxrl_llm.algorithms."
                f"register_collected({kind.__name__}, serve, name=...) in the module that "
                "defines it, and load that module (--import) before the run (docs/extending.md)"
            )
        raise ValueError(
            f"config.algorithm={algorithm.name!r} asks for {request!r}, which {collector} "
            f"does not collect: {how}."
        )
