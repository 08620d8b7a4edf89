"""The stabilisers of `jaxrl_llm.algorithms.stabilisers` applied to a run's steps.

`StepStabilisers` sits between the rollout and the algorithm in the synchronous and asynchronous
runners (any algorithm; each stabiliser checks it applies in `validate_stabilisers`):

    collect(generate_round)   dynamic sampling: rounds of `generate_round(r)` until the step's
                              groups have a right and a wrong answer (or the rounds run out),
                              then the rows of the chosen groups as one `Generated` (tied
                              groups that top the batch up carry no loss);
                              overlong shaping of the rewards ("soft") or of the loss mask
                              ("filter")
    prepare(batch)            the adaptive entropy coefficient as a per-row batch field;
                              Clip-Cov's per-token uniform draws (`token_noise`) and, when it
                              adapts, its share as a per-row field
    observe(train_scalars)    updates the coefficient and Clip-Cov's share from the step's
                              entropy (not after a step whose rows were all masked); a target
                              given as a ratio is set by the first such step

Its state (the entropy coefficient, Clip-Cov's share, their targets, the count of Clip-Cov's
draws) lives in the run's checkpointed `meta`, so a resumed run continues them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax.numpy as jnp
import ml_collections
import numpy as np

from jaxrl_llm.algorithms.stabilisers import (
    EntropyControlState,
    entropy_control,
    group_has_signal,
    select_groups,
    soft_overlong_penalty,
    validate_stabilisers,
)
from jaxrl_llm.rollout.types import FinishReason

__all__ = ["StepStabilisers", "take_groups"]

META_KEY = "entropy_coef"
TARGET_KEY = "entropy_target"  # nats, set by the first measured step under entropy_target_ratio
NOISE_DRAWS_KEY = "clip_cov_draws"
CLIP_COV_KEY = "clip_cov_fraction"  # Clip-Cov's adaptive share
CLIP_COV_TARGET_KEY = "clip_cov_target"  # nats, set by the first measured step


def _pad_rows(x: np.ndarray, width: int, value) -> np.ndarray:
    """[B, T] -> [B, width] padded on the right with `value` (1-D arrays pass through)."""
    x = np.asarray(x)
    if x.ndim < 2 or x.shape[1] == width:
        return x
    return np.pad(x, [(0, 0), (0, width - x.shape[1])], constant_values=value)


def _concat(parts: Sequence[np.ndarray], value) -> np.ndarray:
    width = max(np.asarray(p).shape[1] for p in parts) if np.asarray(parts[0]).ndim > 1 else 0
    return np.concatenate([_pad_rows(p, width, value) for p in parts])


def take_groups(
    rounds: Sequence[Any], picks: Sequence[tuple[int, int]], group_size: int, *, pad_id: int
):
    """One `Generated` of the picked (round, group) pairs' rows, in pick order.

    Rows of rounds with different widths (prompt buckets) are padded on the right: tokens with
    `pad_id`, masks with False, log-probs with 0, token versions with -1, registered collected
    fields ([B, ...], gathered by row) with 0. Times and reward error counts add up over the
    rounds; the decode-work counters (`work`) are the first round's.
    """
    rows = {r: [] for r in range(len(rounds))}
    order = []  # (round, position among that round's picked rows) in pick order
    for r, g in picks:
        for k in range(g * group_size, (g + 1) * group_size):
            order.append((r, len(rows[r])))
            rows[r].append(k)
    used = [r for r in range(len(rounds)) if rows[r]]
    offsets = dict(zip(used, np.cumsum([0] + [len(rows[r]) for r in used])[:-1], strict=True))
    index = np.asarray([offsets[r] + i for r, i in order])

    def gather(field_of, value):
        parts = [np.asarray(field_of(rounds[r]))[rows[r]] for r in used]
        return _concat(parts, value)[index]

    first = rounds[0]
    rollout = type(first.rollout)(
        **{
            name: gather(lambda g, n=name: getattr(g.rollout, n), pad_id if name == "tokens" else 0)
            for name in first.rollout._fields
        }
    )
    reward_out = first.reward_out._replace(
        # per-step process rewards feed dense placement only (PPO), which dynamic sampling does
        # not serve (`validate_stabilisers`); they are not gathered
        **({"steps": None} if "steps" in first.reward_out._fields else {}),
        total=gather(lambda g: g.reward_out.total, 0),
        per_function={
            name: gather(lambda g, n=name: g.reward_out.per_function[n], 0)
            for name in first.reward_out.per_function
        },
        num_errors={
            k: sum(g.reward_out.num_errors[k] for g in rounds) for k in first.reward_out.num_errors
        },
        num_timeouts={
            k: sum(g.reward_out.num_timeouts[k] for g in rounds)
            for k in first.reward_out.num_timeouts
        },
    )
    skipped = getattr(first.reward_out, "num_skipped", None)  # user batch rewards' counts
    if skipped:
        counts = {k: sum(g.reward_out.num_skipped[k] for g in rounds) for k in skipped}
        reward_out = reward_out._replace(num_skipped=counts)
    examples = [rounds[r].examples[g] for r, g in picks]
    completions = [
        rounds[r].completions[k]
        for r, g in picks
        for k in range(g * group_size, (g + 1) * group_size)
    ]
    references = None
    if first.references is not None:  # one row per prompt: the picked groups' rows
        fields = first.references._fields
        references = type(first.references)(
            *[
                _concat(
                    [np.asarray(getattr(rounds[r].references, f))[g : g + 1] for r, g in picks],
                    pad_id if f == "tokens" else 0,
                )
                for f in fields
            ]
        )
    return first._replace(
        examples=examples,
        rollout=rollout,
        completions=completions,
        reward_out=reward_out,
        baseline_rewards=None
        if first.baseline_rewards is None
        else gather(lambda g: g.baseline_rewards, 0),
        versions_bt=None if first.versions_bt is None else gather(lambda g: g.versions_bt, -1),
        references=references,
        collected=None  # registered fields have one row per sample, like the rollout
        if first.collected is None
        else {name: gather(lambda g, n=name: g.collected[n], 0) for name in first.collected},
        seconds={k: sum(g.seconds.get(k, 0.0) for g in rounds) for k in first.seconds},
    )


class StepStabilisers:
    """The configured stabilisers of one run (`config.stabilise`; all off: a no-op).

    Args:
      config: the run config.
      pad_id: the tokenizer's padding id (rows of rounds of different widths are padded).
      meta: the run's checkpointed metadata, where the entropy coefficient is kept.
      vocab_size: the policy's vocabulary (an entropy target must lie below log V).
    """

    def __init__(
        self,
        config: ml_collections.ConfigDict,
        *,
        pad_id: int,
        meta: dict[str, Any],
        vocab_size: int | None = None,
    ):
        self.config, self.pad_id, self.meta = config, pad_id, meta
        validate_stabilisers(config, vocab_size=vocab_size)
        s = config.stabilise
        self.adaptive = s.entropy_target > 0 or s.entropy_target_ratio > 0
        if self.adaptive:
            meta.setdefault(META_KEY, float(config.loss.entropy_coef))
        self.adaptive_clip_cov = s.clip_cov_target_ratio > 0
        if self.adaptive_clip_cov:
            meta.setdefault(CLIP_COV_KEY, float(s.clip_cov_fraction))

    def collect(self, generate_round: Callable[[int], Any]) -> tuple[Any, dict[str, float]]:
        """A step's `Generated` (see the module docstring) and its stabiliser metrics."""
        s, group = self.config.stabilise, self.config.rollout.group_size
        rounds = [generate_round(0)]
        scalars: dict[str, float] = {}
        if s.dynamic_sampling:
            signals = [group_has_signal(_correctness(rounds[0].reward_out), group)]
            needed = self.config.rollout.num_prompts
            while (
                sum(int(x.sum()) for x in signals) < needed and len(rounds) < s.max_sampling_rounds
            ):
                rounds.append(generate_round(len(rounds)))
                signals.append(group_has_signal(_correctness(rounds[-1].reward_out), group))
            picks = select_groups(signals, needed)
            generated = take_groups(rounds, picks, group, pad_id=self.pad_id)
            tied_b = np.repeat([not signals[r][g] for r, g in picks], group)
            generated = _without_loss(generated, tied_b)
            kept = sum(bool(signals[r][g]) for r, g in picks)
            scalars = {
                "stabilise/sampling_rounds": float(len(rounds)),
                "stabilise/kept_group_fraction": kept / needed,
                "stabilise/first_round_signal_fraction": float(signals[0].mean()),
                "stabilise/first_round_accuracy": float(
                    np.mean(rounds[0].reward_out.per_function["task"] == 1.0)
                ),
            }
        else:
            generated = rounds[0]
        return self.shape_overlong(generated, scalars)

    def shape_overlong(self, generated, scalars: dict[str, float]):
        """Applies `config.stabilise.overlong` to a step's `Generated` (module docstring)."""
        s, rollout = self.config.stabilise, generated.rollout
        truncated = np.asarray(rollout.finish_reason) == int(FinishReason.LENGTH)
        if s.overlong == "filter":
            generated = _without_loss(generated, truncated)
            scalars["stabilise/filtered_fraction"] = float(truncated.mean())
        elif s.overlong == "soft":
            penalty = soft_overlong_penalty(
                rollout.lengths,
                max_tokens=self.config.rollout.max_new_tokens,
                cache_tokens=s.overlong_cache_tokens,
            )
            out = generated.reward_out
            out = out._replace(
                total=(out.total + s.overlong_weight * penalty).astype(np.float32),
                per_function={**out.per_function, "overlong": penalty},
            )
            generated = generated._replace(reward_out=out)
            scalars["stabilise/overlong_penalty"] = float(penalty.mean())
        return generated, scalars

    def prepare(self, batch):
        """`batch` with the adaptive entropy coefficient per row and Clip-Cov's per-token
        draws, each when configured (else unchanged).

        The draws of the k-th prepared batch of a run come from the generator seeded with
        (config.seed, k), k counted in `meta`: a run and its resumption draw the same.
        """

        def per_row(value: float):
            return jnp.full((batch.tokens.shape[0],), value, jnp.float32)

        if self.adaptive:
            batch = batch._replace(entropy_coef=per_row(self.meta[META_KEY]))
        if self.adaptive_clip_cov:
            batch = batch._replace(clip_cov_fraction=per_row(self.meta[CLIP_COV_KEY]))
        if self.config.stabilise.clip_cov_fraction > 0:
            draws = self.meta.get(NOISE_DRAWS_KEY, 0)
            rng = np.random.default_rng([int(self.config.seed), draws])
            noise = rng.random(batch.tokens.shape, dtype=np.float32)
            self.meta[NOISE_DRAWS_KEY] = draws + 1
            batch = batch._replace(token_noise=jnp.asarray(noise))
        return batch

    def observe(
        self, train_scalars: dict[str, float], *, trained_tokens: bool = True
    ) -> dict[str, float]:
        """Updates the entropy coefficient and Clip-Cov's share from the step's
        `train/entropy`; their metrics (the values the step used, and the targets). A step with
        no token in its loss (every group tied, so every row masked) measured no entropy and
        leaves both as they were. A target given as a ratio (`entropy_target_ratio`,
        `clip_cov_target_ratio`) is set by the first measured step: that share of its entropy
        (so its own update is log c += rate x (ratio - 1) x H, a step down)."""
        if "train/entropy" not in train_scalars or not trained_tokens:
            return {}
        s, entropy = self.config.stabilise, float(train_scalars["train/entropy"])
        metrics = {}
        if self.adaptive:
            if s.entropy_target > 0:  # in nats: the config's, also on a resumed run
                target = float(s.entropy_target)
            else:
                target = self.meta.setdefault(TARGET_KEY, s.entropy_target_ratio * entropy)
            control = entropy_control(
                initial_coef=self.config.loss.entropy_coef,
                target=target,
                rate=s.entropy_rate,
                max_coef=s.entropy_max_coef,
                min_coef=s.entropy_min_coef,
            )
            used = self._step(META_KEY, control, entropy)
            metrics.update({"stabilise/entropy_coef": used, "stabilise/entropy_target": target})
        if self.adaptive_clip_cov:  # the same dual ascent, on log(share)
            target = self.meta.setdefault(CLIP_COV_TARGET_KEY, s.clip_cov_target_ratio * entropy)
            control = entropy_control(
                initial_coef=s.clip_cov_fraction,
                target=target,
                rate=s.clip_cov_rate,
                max_coef=s.clip_cov_max_fraction,
                min_coef=s.clip_cov_min_fraction,
            )
            used = self._step(CLIP_COV_KEY, control, entropy)
            metrics.update(
                {"stabilise/clip_cov_fraction": used, "stabilise/clip_cov_target": target}
            )
        return metrics

    def _step(self, key: str, control, entropy: float) -> float:
        """Moves `meta[key]` one `control` update from `entropy`; returns the value the step
        used (the one before the update)."""
        used = self.meta[key]
        self.meta[key] = control.update(EntropyControlState(used), entropy).coef
        return used


def _without_loss(generated, rows_b: np.ndarray):
    """`generated` with the loss mask of the rows where bool [B] `rows_b` is set cleared
    (truncated completions under `overlong="filter"`; tied top-up groups of dynamic sampling).

    The tied groups that top a dynamically sampled batch up (the rounds ran out) carry no
    gradient, as DAPO's batch holds none of them: under a plain 0/1 reward their advantages are
    0 anyway, but a shaped total (the chance correction, the soft overlong penalty) differs
    inside them, and group normalisation would scale that small spread to full-size advantages
    (Gemma 3 270M's base run collapsed onto answering "11" that way, 2026-11-26).
    """
    if not rows_b.any():
        return generated
    rollout = generated.rollout
    mask = np.asarray(rollout.completion_mask) & ~rows_b[:, None]
    return generated._replace(rollout=rollout._replace(completion_mask=mask))


def _correctness(reward_out) -> np.ndarray:
    """[B] what dynamic sampling tests for spread: the task score (`per_function["task"]`),
    as DAPO keeps a group when 0 < #correct < G, else the total reward (a run without a task
    verifier). A shaped total (the chance correction, a format or length term) differs within
    a group that is all wrong, which DAPO would resample."""
    return np.asarray(reward_out.per_function.get("task", reward_out.total))
