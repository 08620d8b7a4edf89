"""Reward shaping: DAPO's overlong penalty, sequence scores placed on the last token, process
reward models' step rewards placed on each step's last token, the KL penalty folded into token
rewards, and the adaptive KL coefficient as an `(init, update)` pair.
"""

from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp

from jaxrl_llm.losses import _checks
from jaxrl_llm.losses.aggregation import masked_mean
from jaxrl_llm.losses.kl import kl as kl_estimate


def overlong_penalty(
    lengths_b: jax.Array, *, max_len: int, cache_len: int, factor: float = 1.0
) -> jax.Array:
    """DAPO's soft overlong punishment: a length penalty that ramps down over the last tokens.

    See "DAPO: An Open-Source LLM Reinforcement Learning System at Scale" (2503.14476), eq. (13),
    with `L_exp = max_len - cache_len`:

        R(|y|) = 0                          if |y| <= L_exp
               = (L_exp - |y|) / cache_len  if L_exp < |y| <= max_len
               = -1                         if |y| > max_len
        penalty = factor * R(|y|)      (<= 0; add it to the task reward)

    verl's `overlong_buffer` computes the same ramp (`overlong_buffer.len` = cache_len,
    `penalty_factor` = factor) without the floor at -1, which it never reaches since responses
    stop at max_len.

    Args:
      lengths_b: [B] response lengths in tokens.
      max_len: L_max, the maximum response length.
      cache_len: L_cache, the length of the ramp, 0 < cache_len <= max_len.
      factor: scale of the penalty.

    Returns:
      [B] float32 penalties in [-factor, 0].

    Example:
      >>> overlong_penalty(jnp.array([10, 18, 25]), max_len=20, cache_len=4)
      Array([ 0. , -0.5, -1. ], dtype=float32)
    """
    fn = "overlong_penalty"
    if not 0 < cache_len <= max_len:
        raise ValueError(f"{fn}: need 0 < cache_len={cache_len} <= max_len={max_len}")
    _checks.same_shape(fn, axes="[B]", lengths_b=lengths_b)
    (lengths_b,) = _checks.floating(lengths_b)
    expected = max_len - cache_len
    return factor * jnp.clip((expected - lengths_b) / cache_len, -1.0, 0.0)


def last_token_rewards(scores_b: jax.Array, mask_bt: jax.Array) -> jax.Array:
    """Places each sequence's score on its last valid token; zeros elsewhere.

    See "Fine-Tuning Language Models from Human Preferences" (1909.08593): the reward-model score
    is the reward of the final action, with per-token KL penalties on every action.

        r_bt = score_b if t == max{t' : m_bt' > 0} else 0

    Sequences with no valid token get no reward.

    Args:
      scores_b: [B] sequence-level scores.
      mask_bt: [B, T] mask, nonzero on response tokens.

    Returns:
      [B, T] token rewards.
    """
    fn = "last_token_rewards"
    _checks.same_shape(fn, axes="[B, T]", mask_bt=mask_bt)
    scores_bt = _checks.per_token(fn, "scores_b", scores_b, mask_bt, "mask_bt")
    (scores_bt,) = _checks.floating(scores_bt)
    valid_bt = mask_bt > 0
    num_tokens = valid_bt.shape[-1]
    last_b = num_tokens - 1 - jnp.argmax(valid_bt[:, ::-1], axis=-1)
    is_last_bt = (jnp.arange(num_tokens)[None, :] == last_b[:, None]) & valid_bt
    return jnp.where(is_last_bt, scores_bt, 0.0)


def step_token_rewards(
    outcome_b: jax.Array,
    step_rewards_bs: jax.Array,
    step_columns_bs: jax.Array,
    mask_bt: jax.Array,
) -> jax.Array:
    """Dense process rewards: each step's reward on the step's last token, the outcome on the
    sequence's last token.

    See "On Designing Effective RL Reward at Training Time for LLM Reasoning" (2410.15115): a
    process reward model's (refined) score of step k is the reward of the action that ends
    step k, and the success reward is the reward of the final action:

        r_bt = outcome_b [t = last_b] + sum_k s_bk [t = c_bk]        (0 where m_bt = 0)

    The undiscounted return of a sequence is outcome_b + sum_k s_bk, the summed form's total;
    what changes is where GAE sees each reward. Steps on the same token add up (the last step
    may end on the last token); a step whose column is padding (< 0) or not a valid token is
    dropped, as GAE ignores rewards on masked tokens.

    Args:
      outcome_b: [B] the score placed on each sequence's last valid token (the success reward).
      step_rewards_bs: [B, S] step rewards (refined and weighted), 0 at padding.
      step_columns_bs: [B, S] int, the column of each step's last token; < 0 at padding.
      mask_bt: [B, T] mask, nonzero on response tokens.

    Returns:
      [B, T] token rewards.

    Example:
      >>> step_token_rewards(jnp.array([1.0]), jnp.array([[-0.2, -0.1]]), jnp.array([[1, 2]]),
      ...                    jnp.array([[0, 1, 1, 1]]))
      Array([[ 0. , -0.2, -0.1,  1. ]], dtype=float32)
    """
    fn = "step_token_rewards"
    _checks.same_shape(fn, axes="[B, T]", mask_bt=mask_bt)
    _checks.same_shape(
        fn, axes="[B, S]", step_rewards_bs=step_rewards_bs, step_columns_bs=step_columns_bs
    )
    chex.assert_axis_dimension(
        step_rewards_bs,
        0,
        mask_bt.shape[0],
        custom_message=f"{fn}: step_rewards_bs has {step_rewards_bs.shape[0]} rows, mask_bt "
        f"{mask_bt.shape[0]}",
    )
    (step_rewards_bs,) = _checks.floating(step_rewards_bs)
    hits_bst = step_columns_bs[:, :, None] == jnp.arange(mask_bt.shape[-1])[None, None, :]
    # a select and a sum, not an einsum: exact in float32 on every backend (no bf16 matmul)
    steps_bt = jnp.where(hits_bst, step_rewards_bs[:, :, None], 0.0).sum(axis=1)
    rewards_bt = last_token_rewards(outcome_b, mask_bt) + steps_bt
    return jnp.where(mask_bt > 0, rewards_bt, 0.0)


def kl_in_reward(
    rewards_bt: jax.Array,
    logp_bt: jax.Array,
    ref_logp_bt: jax.Array,
    mask_bt: jax.Array,
    *,
    beta: float | jax.Array,
    estimator: str = "k1",
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Folds a per-token KL penalty to the reference policy into the token rewards.

    See "Training language models to follow instructions with human feedback" (2203.02155),
    eq. (2), and "Fine-Tuning Language Models from Human Preferences" (1909.08593):

        r'_t = m_t (r_t - beta * kl_t),   kl_t = kl(logp_t, ref_logp_t, estimator)

    The default "k1" (`logp - ref_logp`) matches verl's `use_kl_in_reward` with `kl_penalty="kl"`,
    TRL's PPO and OpenRLHF. The penalty carries no gradient: rewards are data.

    Args:
      rewards_bt: [B, T] token rewards, e.g. from `last_token_rewards`.
      logp_bt: [B, T] log-probs of the sampled tokens under the rollout (old) policy.
      ref_logp_bt: [B, T] log-probs under the reference policy.
      mask_bt: [B, T] mask, nonzero on response tokens.
      beta: KL coefficient, a float or a [] array (e.g. `AdaptiveKLState.coef`).
      estimator: a KL estimator name, see `kl`.

    Returns:
      `(rewards_bt, metrics)`: [B, T] shaped rewards (0 on masked tokens) and {"kl" (mean over
      sequences of the per-token mean, verl's `current_kl`), "kl_sum" (mean over sequences of the
      summed KL, TRL's `objective/kl`), "kl_penalty" (beta * kl)}.
    """
    fn = "kl_in_reward"
    _checks.same_shape(
        fn,
        axes="[B, T]",
        rewards_bt=rewards_bt,
        logp_bt=logp_bt,
        ref_logp_bt=ref_logp_bt,
        mask_bt=mask_bt,
    )
    (rewards_bt,) = _checks.floating(rewards_bt)
    kl_bt = jax.lax.stop_gradient(kl_estimate(logp_bt, ref_logp_bt, estimator=estimator))
    valid_bt = mask_bt > 0
    shaped_bt = jnp.where(valid_bt, rewards_bt - beta * kl_bt, 0.0)
    seq_b = valid_bt.any(-1)
    kl_seq_mean_b = masked_mean(kl_bt, mask_bt, axis=-1)
    kl_seq_sum_b = jnp.where(valid_bt, kl_bt, 0.0).sum(-1)
    kl_mean = masked_mean(kl_seq_mean_b, seq_b)
    metrics = {
        "kl": kl_mean,
        "kl_sum": masked_mean(kl_seq_sum_b, seq_b),
        "kl_penalty": beta * kl_mean,
    }
    return jax.lax.stop_gradient(shaped_bt), jax.lax.stop_gradient(metrics)


class AdaptiveKLState(NamedTuple):
    """State of the adaptive KL controller.

    Attributes:
      coef: [] the current KL coefficient beta.
    """

    coef: jax.Array


def adaptive_kl_init(init_coef: float) -> AdaptiveKLState:
    """Initial state of the adaptive KL controller.

    See "Fine-Tuning Language Models from Human Preferences" (1909.08593), section 2.2:
    `beta_0 = init_coef`; `adaptive_kl_update` moves it toward a target KL.

    Args:
      init_coef: the starting KL coefficient beta_0 (>= 0).

    Returns:
      `AdaptiveKLState` with a float32 [] coefficient.
    """
    if isinstance(init_coef, int | float) and init_coef < 0:  # traced values skip the check
        raise ValueError(f"adaptive_kl_init: init_coef={init_coef} must be >= 0")
    return AdaptiveKLState(coef=jnp.asarray(init_coef, jnp.float32))


def adaptive_kl_update(
    state: AdaptiveKLState,
    current_kl: jax.Array | float,
    n_steps: jax.Array | int,
    *,
    target: float,
    horizon: float,
) -> AdaptiveKLState:
    """One step of the adaptive KL controller: a clipped proportional controller on beta.

    See "Fine-Tuning Language Models from Human Preferences" (1909.08593), section 2.2:

        e        = clip(current_kl / target - 1, -0.2, 0.2)
        beta'    = beta * (1 + e * n_steps / horizon)

    This is the form of verl's `AdaptiveKLController`, TRL's and OpenRLHF's (the paper writes
    `K_beta = n_steps / horizon`, with K_beta = 0.1). Pure: returns a new state.

    Args:
      state: the controller state.
      current_kl: [] the KL measured on the last batch (e.g. `kl_in_reward` metrics "kl").
      n_steps: samples (or steps) since the last update, as the peers pass the batch size.
      target: the target KL (> 0).
      horizon: the horizon of the controller (> 0).

    Returns:
      The updated `AdaptiveKLState`.

    Example:
      >>> state = adaptive_kl_init(0.1)
      >>> state = adaptive_kl_update(state, 0.5, 256, target=6.0, horizon=10000)
    """
    fn = "adaptive_kl_update"
    if not target > 0:
        raise ValueError(f"{fn}: target={target} must be > 0")
    if not horizon > 0:
        raise ValueError(f"{fn}: horizon={horizon} must be > 0")
    error = jnp.clip(jnp.asarray(current_kl, jnp.float32) / target - 1.0, -0.2, 0.2)
    mult = 1.0 + error * jnp.asarray(n_steps, jnp.float32) / horizon
    return AdaptiveKLState(coef=state.coef * mult)
