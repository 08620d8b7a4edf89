"""Stabilisers of group-advantage RL, as pure functions and one config section.

What keeps a small policy learning rather than collapsing (docs/recipe.md): most of a step's
groups tie (every completion right, or every one wrong) and carry no gradient under group
advantages; truncated completions are judged on a cut-off answer; entropy falls until the
samples stop exploring. The remedies, each off by default:

- Dynamic sampling (DAPO, "DAPO: An Open-Source LLM Reinforcement Learning System at Scale",
  arXiv:2503.14476, sec. 3.2): keep sampling new prompts, up to `max_sampling_rounds` rounds a
  step, until the batch's groups all have correctness spread (0 < #correct < G, read from the
  task score, not the shaped total); the batch keeps its size, topped up with tied groups when
  the rounds run out (`select_groups`), whose rows carry no loss (DAPO's batch holds none).
- Overlong handling (DAPO sec. 3.4): "filter" masks truncated completions out of the loss;
  "soft" adds the soft overlong punishment
      R(y) = 0                              if |y| <= L_max - L_cache
           = ((L_max - L_cache) - |y|) / L_cache   if L_max - L_cache < |y| <= L_max
           = -1                             if |y| > L_max
  (`soft_overlong_penalty`; here |y| <= L_max = max_new_tokens always, so the last branch is
  the truncated rows' value at the limit).
- An entropy coefficient adapted to a target entropy H* by dual ascent on log c, as SAC's
  automatic temperature ("Soft Actor-Critic Algorithms and Applications", arXiv:1812.05905,
  eq. 18): log c <- log c + rate * (H* - H), clipped to [c_min, c_max] (`entropy_control`).
  H* is given in nats (`entropy_target`) or as a share of the run's first measured entropy
  (`entropy_target_ratio`), as discrete SAC sets it as a share of the largest entropy
  (Christodoulou, "Soft Actor-Critic for Discrete Action Settings", arXiv:1910.07207, sec. 3):
  a base model's sampled entropy differs by task (1.4-1.9 nats for SmolLM2 on the tuning tasks),
  so a target in nats sits at a different share of each.
- Clip-Cov ("The Entropy Mechanism of Reinforcement Learning for Reasoning Language Models",
  arXiv:2505.22617): the policy-gradient term drops a random `clip_cov_fraction` of
  the loss tokens among those whose log-prob and advantage covary within [clip_cov_low,
  clip_cov_high], the tokens that drive entropy down (`jaxrl_llm.losses.covariance`). Its
  share can follow an entropy target by the same dual ascent, on log(share) rather than
  log(coefficient) (`clip_cov_target_ratio`): raised while entropy is under the target,
  lowered toward its floor while entropy is over it. A fixed share that holds one task's
  entropy can inflate another's (10% on gcd took the sampled entropy to 2.4x its start,
  docs/recipe.md); the target is the brake.
- KL to the reference (`config.loss.kl_beta`, k3) and a decaying rate
  (`config.optimizer.schedule`) are the loss's and the optimizer's own fields.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import NamedTuple

import ml_collections
import numpy as np

__all__ = [
    "CLIP_COV_ALGORITHMS",
    "DYNAMIC_SAMPLING_ALGORITHMS",
    "OVERLONG_MODES",
    "EntropyControl",
    "EntropyControlState",
    "entropy_control",
    "group_has_signal",
    "select_groups",
    "soft_overlong_penalty",
    "stabilisers_section",
    "validate_stabilisers",
]

OVERLONG_MODES = ("none", "filter", "soft")
# Algorithms whose advantages (or pairs) come from reward differences within a group: a tied
# group gives them nothing, so resampling it helps.
DYNAMIC_SAMPLING_ALGORITHMS = ("grpo", "online_dpo", "rrhf")
# Algorithms whose actor loss is the clipped policy gradient (`algorithms.policy_loss`), where
# Clip-Cov drops tokens.
CLIP_COV_ALGORITHMS = ("grpo", "ppo", "reinforce_pp", "remax")


def stabilisers_section() -> ml_collections.ConfigDict:
    """`config.stabilise`: the stabilisers of the module docstring, all off."""
    c = ml_collections.ConfigDict()
    # DAPO's dynamic sampling: resample prompts until every group of the step has a right and a
    # wrong answer (the task score), for at most max_sampling_rounds rollouts per step (1 = no
    # resampling).
    c.dynamic_sampling = False
    c.max_sampling_rounds = 3
    # Truncated completions: "none", "filter" (no loss on them) or "soft" (DAPO's soft overlong
    # punishment over the last overlong_cache_tokens tokens before max_new_tokens, weighted).
    c.overlong = "none"
    c.overlong_cache_tokens = 8
    c.overlong_weight = 1.0
    # Target entropy (nats per completion token) for an adaptive entropy coefficient starting
    # at config.loss.entropy_coef; 0 keeps the coefficient fixed. entropy_rate is the step of
    # log(coefficient) per nat of gap, entropy_max_coef its ceiling and entropy_min_coef its
    # floor: while entropy is above the target the coefficient falls, and from 1e-6 it takes
    # tens of steps to climb back once entropy falls under the target (a floor at the starting
    # coefficient keeps it ready).
    c.entropy_target = 0.0
    # Or the target as a share of the first trained step's entropy (0 off; in (0, 1); not with
    # entropy_target): 0.5 holds the policy near half of its starting entropy.
    c.entropy_target_ratio = 0.0
    c.entropy_rate = 0.5
    c.entropy_max_coef = 0.05
    c.entropy_min_coef = 1e-6
    # Clip-Cov: the share r of a step's loss tokens whose policy gradient is dropped, drawn at
    # random among those whose (log-prob, advantage) covariance lies in [clip_cov_low,
    # clip_cov_high]; 0 is off. At least one eligible token is dropped when r > 0, so a batch
    # of short answers (hundreds of tokens) wants r of a percent or more, not the paper's 2e-4.
    c.clip_cov_fraction = 0.0
    c.clip_cov_low = 1.0
    c.clip_cov_high = 5.0
    # Clip-Cov's share adapted toward a target entropy, given as a share of the first trained
    # step's entropy (0: the share stays clip_cov_fraction; else in (0, 1]). The share starts at
    # clip_cov_fraction and each step log(share) += clip_cov_rate x (target - entropy), kept in
    # [clip_cov_min_fraction, clip_cov_max_fraction].
    c.clip_cov_target_ratio = 0.0
    c.clip_cov_rate = 1.0
    c.clip_cov_min_fraction = 0.002
    c.clip_cov_max_fraction = 0.3
    return c


def validate_stabilisers(config: ml_collections.ConfigDict, *, vocab_size: int | None = None):
    """Raises ValueError naming the first bad field of `config.stabilise` and the fix.

    Args:
      config: a run config with `stabilise`, `algorithm`, `rollout`, `loss` sections.
      vocab_size: the policy's vocabulary, when known: an entropy target must lie in
        (0, log V) nats, the range of a per-token entropy.
    """
    s = config.stabilise
    if s.max_sampling_rounds < 1:
        raise ValueError(
            f"config.stabilise.max_sampling_rounds={s.max_sampling_rounds} must be >= 1 (the "
            "first rollout counts; 3 allows two resampling rounds)."
        )
    if s.dynamic_sampling:
        if config.algorithm not in DYNAMIC_SAMPLING_ALGORITHMS or config.rollout.group_size < 2:
            raise ValueError(
                f"config.stabilise.dynamic_sampling=True needs groups compared by reward "
                f"(algorithm one of {DYNAMIC_SAMPLING_ALGORITHMS}, rollout.group_size >= 2); got "
                f"algorithm={config.algorithm!r}, group_size={config.rollout.group_size}. Set "
                "dynamic_sampling=False."
            )
    episodes = config.get("env") is not None and config.env.name
    if episodes and (s.dynamic_sampling or s.overlong != "none"):
        raise ValueError(
            "config.stabilise.dynamic_sampling and overlong apply to single-turn rollouts, not "
            f"to episode runs (config.env.name={config.env.name!r}); turn them off."
        )
    if s.overlong not in OVERLONG_MODES:
        raise ValueError(
            f"config.stabilise.overlong={s.overlong!r} must be one of {OVERLONG_MODES}."
        )
    if s.overlong == "soft" and not 0 < s.overlong_cache_tokens < config.rollout.max_new_tokens:
        raise ValueError(
            f"config.stabilise.overlong_cache_tokens={s.overlong_cache_tokens} must lie in "
            f"(0, rollout.max_new_tokens={config.rollout.max_new_tokens})."
        )
    _validate_clip_cov(config)
    if s.entropy_target < 0:
        raise ValueError(f"config.stabilise.entropy_target={s.entropy_target} must be >= 0.")
    if not 0 <= s.entropy_target_ratio < 1:
        raise ValueError(
            f"config.stabilise.entropy_target_ratio={s.entropy_target_ratio} must lie in [0, 1): "
            "the share of the first step's entropy to hold (0 turns it off; 0.5 holds half)."
        )
    if s.entropy_target > 0 and s.entropy_target_ratio > 0:
        raise ValueError(
            f"config.stabilise.entropy_target={s.entropy_target} and entropy_target_ratio="
            f"{s.entropy_target_ratio} both set the entropy target: set one of them to 0."
        )
    if s.entropy_target > 0 or s.entropy_target_ratio > 0:
        if vocab_size is not None and s.entropy_target >= math.log(vocab_size):
            raise ValueError(
                f"config.stabilise.entropy_target={s.entropy_target} must lie in (0, log V = "
                f"{math.log(vocab_size):.2f}) nats, the range of a token's entropy."
            )
        low, high = s.entropy_min_coef, s.entropy_max_coef
        if s.entropy_rate <= 0:
            raise ValueError(
                f"config.stabilise.entropy_rate={s.entropy_rate} must be > 0: how fast the "
                "entropy weight adapts (the weight is multiplied by exp(rate x nats under the "
                "target) each step; 0.5 is the default)."
            )
        if not 0 < low <= high:
            raise ValueError(
                f"config.stabilise.entropy_min_coef={low} and entropy_max_coef={high} bound the "
                "adaptive entropy weight: set 0 < entropy_min_coef <= entropy_max_coef."
            )
        if not low <= config.loss.entropy_coef <= high:
            raise ValueError(
                f"config.loss.entropy_coef={config.loss.entropy_coef} is where the adaptive "
                "entropy weight starts (config.stabilise.entropy_target or entropy_target_ratio "
                "> 0): "
                f"it must start in [entropy_min_coef={low}, entropy_max_coef={high}]; set "
                "config.loss.entropy_coef within it (or the bounds around it)."
            )


def _validate_clip_cov(config: ml_collections.ConfigDict) -> None:
    s = config.stabilise
    if not 0 <= s.clip_cov_fraction < 1:
        raise ValueError(
            f"config.stabilise.clip_cov_fraction={s.clip_cov_fraction} must lie in [0, 1): the "
            "share of loss tokens whose policy gradient Clip-Cov drops (0 turns it off; 0.02 "
            "drops 2%)."
        )
    if s.clip_cov_fraction == 0:
        if s.clip_cov_target_ratio != 0:
            raise ValueError(
                f"config.stabilise.clip_cov_target_ratio={s.clip_cov_target_ratio} adapts "
                "Clip-Cov's share, which is off (clip_cov_fraction=0): set clip_cov_fraction to "
                "the starting share (e.g. 0.1) or clip_cov_target_ratio=0."
            )
        return
    if config.algorithm not in CLIP_COV_ALGORITHMS:
        raise ValueError(
            f"config.stabilise.clip_cov_fraction={s.clip_cov_fraction} drops tokens of the "
            f"clipped policy-gradient loss, which algorithm={config.algorithm!r} does not use "
            f"(it is one of {CLIP_COV_ALGORITHMS}); set clip_cov_fraction=0."
        )
    if not s.clip_cov_low < s.clip_cov_high:
        raise ValueError(
            f"config.stabilise.clip_cov_low={s.clip_cov_low} must be below clip_cov_high="
            f"{s.clip_cov_high}: they bound the covariance of the tokens Clip-Cov may drop "
            "(the paper: 1 and 5)."
        )
    if s.clip_cov_target_ratio == 0:
        return
    if not 0 < s.clip_cov_target_ratio <= 1:
        raise ValueError(
            f"config.stabilise.clip_cov_target_ratio={s.clip_cov_target_ratio} must lie in "
            "[0, 1]: the share of the first step's entropy Clip-Cov's share steers toward (0 "
            "keeps the share fixed; 0.8 holds 80%)."
        )
    if s.clip_cov_rate <= 0:
        raise ValueError(
            f"config.stabilise.clip_cov_rate={s.clip_cov_rate} must be > 0: how fast Clip-Cov's "
            "share adapts (it is multiplied by exp(rate x nats under the target) each step)."
        )
    low, high = s.clip_cov_min_fraction, s.clip_cov_max_fraction
    if not 0 < low <= s.clip_cov_fraction <= high < 1:
        raise ValueError(
            f"config.stabilise.clip_cov_fraction={s.clip_cov_fraction} is where the adaptive "
            f"share starts: it must lie in [clip_cov_min_fraction={low}, clip_cov_max_fraction="
            f"{high}], with 0 < clip_cov_min_fraction and clip_cov_max_fraction < 1; set them so."
        )


def group_has_signal(rewards_b: np.ndarray, group_size: int) -> np.ndarray:
    """bool [B / G]: whether each group of G adjacent rows has rewards that are not all equal.

    Example:
      >>> group_has_signal(np.array([1., 1., 0., 1., 0., 0.]), 3)
      array([ True, False])
    """
    rewards_gk = np.asarray(rewards_b, np.float64).reshape(-1, group_size)
    return rewards_gk.max(axis=1) > rewards_gk.min(axis=1)


def select_groups(signals: Sequence[np.ndarray], num_groups: int) -> list[tuple[int, int]]:
    """The (round, group) pairs a step trains on: groups with signal first, in sampling order,
    then tied groups of the first rounds to keep the batch at `num_groups`.

    Args:
      signals: per sampling round, bool [G_r] from `group_has_signal`.
      num_groups: the groups a step trains on (`rollout.num_prompts`).

    Example:
      >>> select_groups([np.array([True, False, False]), np.array([False, True, True])], 3)
      [(0, 0), (1, 1), (1, 2)]
    """
    informative = [(r, g) for r, s in enumerate(signals) for g in np.flatnonzero(s)]
    tied = [(r, g) for r, s in enumerate(signals) for g in np.flatnonzero(~np.asarray(s))]
    picks = (informative + tied)[:num_groups]
    if len(picks) < num_groups:
        raise ValueError(f"select_groups: {len(picks)} groups sampled, {num_groups} needed.")
    return [(int(r), int(g)) for r, g in picks]


def soft_overlong_penalty(
    lengths_b: np.ndarray, *, max_tokens: int, cache_tokens: int
) -> np.ndarray:
    """float32 [B]: DAPO's soft overlong punishment of completion lengths (module docstring).

    Example:
      >>> soft_overlong_penalty(np.array([10, 25, 28, 32]), max_tokens=32, cache_tokens=8)
      array([ 0.   , -0.125, -0.5  , -1.   ], dtype=float32)
    """
    lengths_b = np.asarray(lengths_b, np.float64)
    start = max_tokens - cache_tokens
    penalty = np.where(lengths_b <= start, 0.0, (start - lengths_b) / cache_tokens)
    return np.maximum(penalty, -1.0).astype(np.float32)


class EntropyControlState(NamedTuple):
    """The adaptive entropy coefficient's state: its current value."""

    coef: float


class EntropyControl(NamedTuple):
    """An optax-style pair of pure functions: `init() -> state`, `update(state, entropy)`."""

    init: Callable[[], EntropyControlState]
    update: Callable[[EntropyControlState, float], EntropyControlState]


def entropy_control(
    *, initial_coef: float, target: float, rate: float, max_coef: float, min_coef: float = 1e-6
) -> EntropyControl:
    """Dual ascent on log(coefficient) toward a target entropy (module docstring, SAC eq. 18).

    The "coefficient" is any positive quantity that raises entropy as it grows: the entropy
    bonus's weight, or Clip-Cov's share of dropped tokens.

    Args:
      initial_coef: the coefficient before the first update (> 0).
      target: H*, nats per completion token.
      rate: the step of log(coef) per nat of gap H* - H.
      max_coef, min_coef: the coefficient's range.

    Example:
      >>> control = entropy_control(initial_coef=0.01, target=0.5, rate=1.0, max_coef=0.1)
      >>> control.update(control.init(), entropy=0.5 - math.log(2)).coef  # below target: x2
      0.02
    """
    if not 0 < min_coef <= initial_coef <= max_coef:
        raise ValueError(
            f"entropy_control: need 0 < {min_coef=} <= {initial_coef=} <= {max_coef=}."
        )

    def init() -> EntropyControlState:
        return EntropyControlState(float(initial_coef))

    def update(state: EntropyControlState, entropy: float) -> EntropyControlState:
        coef = state.coef * math.exp(rate * (target - float(entropy)))
        return EntropyControlState(float(min(max(coef, min_coef), max_coef)))

    return EntropyControl(init, update)
