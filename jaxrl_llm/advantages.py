"""Advantage estimators: GRPO / Dr. GRPO, RLOO, ReMax, REINFORCE++, GAE, and masked whitening.

Pure functions of arrays, no gradient (rewards and values are data). Shapes: B sequences,
G responses per prompt (`[num_prompts, G]` arrays hold a prompt's group in one row), T tokens.
Outcome estimators return one advantage per sequence; broadcast it over tokens by passing the
`[B]` array to a policy loss (they accept `[B]` or `[B, T]`).

Recursions are written for one sequence with `lax.scan(reverse=True)` and vmapped over B.
"""

import jax
import jax.numpy as jnp

from jaxrl_llm.losses import _checks

__all__ = [
    "discounted_returns",
    "gae",
    "grpo",
    "group_turn_advantages",
    "reinforce_pp",
    "remax",
    "rloo",
    "whiten",
]


# Estimators that compare the G completions of one prompt (the `group_advantages` choices).
GROUP_ESTIMATORS = ("grpo", "rloo")


def _data(*arrays: jax.Array) -> tuple[jax.Array, ...]:
    return tuple(jax.lax.stop_gradient(x) for x in _checks.floating(*arrays))


def grpo(rewards_bg: jax.Array, *, normalize_std: bool = True, eps: float = 1e-6) -> jax.Array:
    """Group-relative advantages of GRPO, or Dr. GRPO's unscaled form.

    See "DeepSeekMath: Pushing the Limits of Mathematical Reasoning in Open Language Models"
    (2402.03300), section 4.1.2, and "Understanding R1-Zero-Like Training: A Critical
    Perspective" (2503.20783) for `normalize_std=False`:

        A_bi = (r_bi - mean_j r_bj) / (std_j r_bj + eps)     (normalize_std=True)
        A_bi =  r_bi - mean_j r_bj                            (normalize_std=False, Dr. GRPO)

    Conventions: std is the unbiased sample std (ddof=1), as `torch.std` in verl and TRL; eps is
    added to the std, not under a square root (verl's 1e-6; TRL uses 1e-4). A group whose rewards
    are all equal gets zero advantages. A group of one (G = 1) has no baseline: as in verl (mean 0,
    std 1) its advantage is the raw reward.

    Args:
      rewards_bg: [num_prompts, G] scalar rewards, one row per prompt.
      normalize_std: divide by the group std (GRPO) or not (Dr. GRPO).
      eps: added to the std.

    Returns:
      [num_prompts, G] advantages.

    Example:
      >>> grpo(jnp.array([[1.0, 0.0, 0.0, 1.0]]))  # mean 0.5, unbiased std 0.57735
      Array([[ 0.8660239, -0.8660239, -0.8660239,  0.8660239]], dtype=float32)
    """
    _checks.same_shape("grpo", axes="[B, G]", rewards_bg=rewards_bg)
    (rewards_bg,) = _data(rewards_bg)
    if rewards_bg.shape[-1] == 1:
        return rewards_bg
    centred_bg = rewards_bg - rewards_bg.mean(axis=-1, keepdims=True)
    if not normalize_std:
        return centred_bg
    std_b1 = jnp.std(rewards_bg, axis=-1, ddof=1, keepdims=True)
    return centred_bg / (std_b1 + eps)


def rloo(rewards_bg: jax.Array) -> jax.Array:
    """REINFORCE leave-one-out advantages: each reward minus the mean of the group's others.

    See "Back to Basics: Revisiting REINFORCE Style Optimization for Learning from Human
    Feedback in LLMs" (2402.14740), eq. (5), after "Buy 4 REINFORCE Samples, Get a Baseline for
    Free!" (Kool et al., 2019):

        A_bi = r_bi - (1 / (G - 1)) sum_{j != i} r_bj = G / (G - 1) * (r_bi - mean_j r_bj)

    Same as verl's and OpenRLHF's "rloo". A group of one (G = 1) has no other sample: as in verl
    its advantage is the raw reward.

    Args:
      rewards_bg: [num_prompts, G] scalar rewards, one row per prompt.

    Returns:
      [num_prompts, G] advantages.

    Example:
      >>> rloo(jnp.array([[1.0, 2.0, 6.0]]))  # 1 - (2 + 6) / 2 = -3, 2 - 3.5, 6 - 1.5
      Array([[-3. , -1.5,  4.5]], dtype=float32)
    """
    _checks.same_shape("rloo", axes="[B, G]", rewards_bg=rewards_bg)
    (rewards_bg,) = _data(rewards_bg)
    group = rewards_bg.shape[-1]
    if group == 1:
        return rewards_bg
    others_bg = rewards_bg.sum(axis=-1, keepdims=True) - rewards_bg
    return rewards_bg - others_bg / (group - 1)


def remax(rewards_b: jax.Array, baseline_rewards_b: jax.Array) -> jax.Array:
    """ReMax advantages: the sampled response's reward minus the greedy response's reward.

    See "ReMax: A Simple, Effective, and Efficient Reinforcement Learning Method for Aligning
    Large Language Models" (2310.10505), Algorithm 1:

        A_b = r(x_b, y_b) - r(x_b, greedy_b)

    verl's "remax" subtracts the same baseline from every token's reward-to-go; with an outcome
    reward on the last token that is this value on every response token.

    Args:
      rewards_b: [B] rewards of the sampled responses.
      baseline_rewards_b: [B] rewards of the greedy (argmax-decoded) responses to the same prompts.

    Returns:
      [B] advantages.
    """
    _checks.same_shape(
        "remax", axes="[B]", rewards_b=rewards_b, baseline_rewards_b=baseline_rewards_b
    )
    rewards_b, baseline_rewards_b = _data(rewards_b, baseline_rewards_b)
    return rewards_b - baseline_rewards_b


def whiten(
    x: jax.Array, mask: jax.Array, *, shift_mean: bool = True, eps: float = 1e-8
) -> jax.Array:
    """Masked whitening: subtract the masked mean and divide by the masked std.

    See "REINFORCE++: A Simple and Efficient Approach for Aligning Large Language Models"
    (2501.03262), global advantage normalisation, and "The N+ Implementation Details of RLHF with
    PPO" (2403.17031) for whitening GAE advantages. Over the n entries where `mask` is nonzero:

        mu  = (1/n) sum m x,        var = (1/(n-1)) sum m (x - mu)^2     (unbiased)
        out = (x - mu) / sqrt(var + eps)          (+ mu again if shift_mean=False)

    Conventions: unbiased variance and `rsqrt(var + eps)` as verl's `masked_whiten` (OpenRLHF uses
    the biased variance); with n = 1 the variance is taken as 0. Masked entries of the output
    are 0. Whiten over the whole batch, across hosts, by computing on the global batch.

    Args:
      x: array of any shape, e.g. [B, T] returns.
      mask: array of the shape of `x`, nonzero where an entry counts.
      shift_mean: if False, add the mean back (only rescale), as verl's `shift_mean=False`.
      eps: added to the variance.

    Returns:
      Whitened array of the shape of `x`.
    """
    _checks.same_shape("whiten", x=x, mask=mask)
    (x,) = _data(x)
    valid = mask > 0
    n = valid.sum().astype(x.dtype)
    mean = jnp.where(valid, x, 0.0).sum() / jnp.maximum(n, 1.0)
    sq = jnp.where(valid, jnp.square(x - mean), 0.0).sum()
    var = sq / jnp.maximum(n - 1.0, 1.0)
    out = (x - mean) * jax.lax.rsqrt(var + eps)
    if not shift_mean:
        out = out + mean
    return jnp.where(valid, out, 0.0)


def _check_bt(fn: str, **arrays: jax.Array) -> None:
    _checks.same_shape(fn, axes="[B, T]", **arrays)


def discounted_returns(rewards_bt: jax.Array, mask_bt: jax.Array, *, gamma: float) -> jax.Array:
    """Discounted reward-to-go over the valid tokens of each sequence.

    See "Reinforcement Learning: An Introduction" (Sutton and Barto), eq. (3.8); used by
    REINFORCE++ (2501.03262). Over the valid tokens t of a sequence, in order:

        G_t = r_t + gamma * G_{t'},   t' the next valid token (G = 0 after the last one)

    Masked tokens are skipped (their reward is ignored and the return passes through them) and
    get 0, as verl's GAE does for observation tokens in multi-turn rollouts.

    Args:
      rewards_bt: [B, T] token rewards.
      mask_bt: [B, T] mask, nonzero on response tokens.
      gamma: discount factor.

    Returns:
      [B, T] returns.
    """
    _check_bt("discounted_returns", rewards_bt=rewards_bt, mask_bt=mask_bt)
    (rewards_bt,) = _data(rewards_bt)
    valid_bt = mask_bt > 0

    def one_sequence(rewards_t, valid_t):
        def step(next_return, inputs):
            r, valid = inputs
            g = r + gamma * next_return
            return jnp.where(valid, g, next_return), jnp.where(valid, g, 0.0)

        zero = jnp.zeros((), rewards_t.dtype)
        _, returns_t = jax.lax.scan(step, zero, (rewards_t, valid_t), reverse=True)
        return returns_t

    return jax.vmap(one_sequence)(rewards_bt, valid_bt)


def group_turn_advantages(
    returns_bgk: jax.Array,
    mask_bgk: jax.Array,
    *,
    normalize_std: bool = True,
    eps: float = 1e-6,
) -> jax.Array:
    """Turn-level group advantages: each turn's return against the same turn of the group.

    See "Regressing the Relative Future: Efficient Policy Optimization for Multi-turn RLHF"
    (REFUEL, 2410.04612) and "ArCHer: Training Language Model Agents via Hierarchical
    Multi-Turn RL" (2402.19446). For multi-turn episodes with per-turn rewards, a turn is
    credited with its own and later turns' rewards (its return R_gk,
    e.g. `discounted_returns` over the turns) compared with the returns of turn k in the other
    episodes of the same prompt, GRPO-style:

        A_gk = (R_gk - mean_{j: k in j} R_jk) / (std_{j: k in j} R_jk + eps)

    over the episodes j of the group that reached turn k (unbiased std; `normalize_std=False`
    only centres). A turn that no other episode of its group reached has no baseline: 0.

    Args:
      returns_bgk: [num_prompts, G, K] turn returns.
      mask_bgk: [num_prompts, G, K], nonzero where episode g has turn k.
      normalize_std: divide by the std over the group's episodes at that turn.
      eps: added to the std.

    Returns:
      [num_prompts, G, K] advantages, 0 where the mask is 0.

    Example:
      >>> returns = jnp.array([[[1.0, 1.0], [0.0, 0.0], [1.0, 0.0]]])   # G = 3, K = 2
      >>> mask = jnp.array([[[1, 1], [1, 1], [1, 0]]])
      >>> group_turn_advantages(returns, mask, normalize_std=False)
      Array([[[ 0.33333334,  0.5       ],
              [-0.6666666 , -0.5       ],
              [ 0.33333334,  0.        ]]], dtype=float32)
    """
    _checks.same_shape(
        "group_turn_advantages", axes="[B, G, K]", returns=returns_bgk, mask=mask_bgk
    )
    (returns_bgk,) = _data(returns_bgk)
    valid = (mask_bgk > 0).astype(returns_bgk.dtype)
    count_bk = valid.sum(axis=1, keepdims=True)
    mean_bk = (returns_bgk * valid).sum(axis=1, keepdims=True) / jnp.maximum(count_bk, 1.0)
    centred = (returns_bgk - mean_bk) * valid
    if normalize_std:
        var_bk = (centred**2).sum(axis=1, keepdims=True) / jnp.maximum(count_bk - 1.0, 1.0)
        centred = centred / (jnp.sqrt(var_bk) + eps)
    return jnp.where(count_bk > 1, centred, 0.0)


def reinforce_pp(rewards_bt: jax.Array, mask_bt: jax.Array, *, gamma: float = 1.0) -> jax.Array:
    """REINFORCE++ advantages: discounted token returns, whitened over the whole batch.

    See "REINFORCE++: A Simple and Efficient Approach for Aligning Large Language Models"
    (2501.03262), eqs. (5)-(7):

        G_t   = sum_{s >= t} gamma^(s - t) r_s       (`discounted_returns`)
        A_t   = (G_t - mean(G)) / std(G)            (`whiten` over all valid tokens of the batch)

    The token rewards normally carry the KL penalty: build them with `last_token_rewards` and
    `kl_in_reward`. For REINFORCE++-baseline (verl "reinforce_plus_plus_baseline"), subtract the
    group mean from the scores first: `grpo(scores_bg, normalize_std=False)`. Matches verl's
    "reinforce_plus_plus" (unbiased variance, eps 1e-8 under the square root).

    Args:
      rewards_bt: [B, T] token rewards (zero except the last token and KL penalties, typically).
      mask_bt: [B, T] mask, nonzero on response tokens.
      gamma: discount factor (the paper and the peers use 1.0).

    Returns:
      [B, T] advantages, 0 on masked tokens.

    Example:
      >>> rewards_bt = last_token_rewards(scores_b, mask_bt)
      >>> rewards_bt, _ = kl_in_reward(rewards_bt, old_logp_bt, ref_logp_bt, mask_bt, beta=0.01)
      >>> adv_bt = reinforce_pp(rewards_bt, mask_bt)
    """
    _check_bt("reinforce_pp", rewards_bt=rewards_bt, mask_bt=mask_bt)
    returns_bt = discounted_returns(rewards_bt, mask_bt, gamma=gamma)
    return whiten(returns_bt, mask_bt)


def gae(
    rewards_bt: jax.Array,
    values_bt: jax.Array,
    mask_bt: jax.Array,
    *,
    gamma: float,
    lam: float,
    critic_lam: float | None = None,
) -> tuple[jax.Array, jax.Array]:
    """Generalized Advantage Estimation over the valid tokens of each sequence.

    See "High-Dimensional Continuous Control Using Generalized Advantage Estimation"
    (1506.02438), eqs. (11)-(16). Over the valid tokens t of a sequence, t' the next valid one:

        delta_t = r_t + gamma * V_{t'} - V_t          (V = 0 after the last valid token)
        A_t     = delta_t + gamma * lam * A_{t'}
        R_t     = A_t + V_t                           (the value-loss target)

    With `critic_lam` the returns come from their own lambda, decoupled from the actor's (see
    "What's Behind PPO's Collapse in Long-CoT? Value Optimization Holds the Secret", VC-PPO,
    2503.01491, section 4.2):

        R_t     = A'_t + V_t,    A'_t = delta_t + gamma * critic_lam * A'_{t'}

    `critic_lam = 1` (with gamma 1) makes R_t the reward-to-go whatever V is: the critic learns
    Monte Carlo returns instead of bootstrapping from its own, possibly biased, values.

    Masked tokens are skipped: their reward and value are ignored and the recursion passes
    through them, as verl does for observation tokens in multi-turn rollouts; they get 0. The
    episode ends at the last valid token (a truncated response bootstraps 0, as verl, TRL and
    OpenRLHF do). Unlike verl, the advantages are not whitened here: call `whiten` for that.

    Args:
      rewards_bt: [B, T] token rewards.
      values_bt: [B, T] value estimates V(s_t) from the critic at rollout time.
      mask_bt: [B, T] mask, nonzero on response tokens.
      gamma: discount factor.
      lam: GAE lambda of the advantages (and of the returns without `critic_lam`).
      critic_lam: GAE lambda of the returns; None takes `lam`.

    Returns:
      `(advantages_bt, returns_bt)`, both [B, T] and 0 on masked tokens.

    Example:
      >>> adv_bt, ret_bt = gae(rewards_bt, values_bt, mask_bt, gamma=1.0, lam=0.95)
      >>> adv_bt, ret_bt = gae(rewards_bt, values_bt, mask_bt, gamma=1.0, lam=0.95, critic_lam=1.0)
    """
    _check_bt("gae", rewards_bt=rewards_bt, values_bt=values_bt, mask_bt=mask_bt)
    rewards_bt, values_bt = _data(rewards_bt, values_bt)
    valid_bt = mask_bt > 0

    def advantages(lam_):
        def one_sequence(rewards_t, values_t, valid_t):
            def step(carry, inputs):
                next_value, next_adv = carry
                r, v, valid = inputs
                adv = r + gamma * next_value - v + gamma * lam_ * next_adv
                carry = (jnp.where(valid, v, next_value), jnp.where(valid, adv, next_adv))
                return carry, jnp.where(valid, adv, 0.0)

            zero = jnp.zeros((), rewards_t.dtype)
            inputs = (rewards_t, values_t, valid_t)
            _, adv_t = jax.lax.scan(step, (zero, zero), inputs, reverse=True)
            return adv_t

        return jax.vmap(one_sequence)(rewards_bt, values_bt, valid_bt)

    adv_bt = advantages(lam)
    critic_adv_bt = adv_bt if critic_lam is None or critic_lam == lam else advantages(critic_lam)
    returns_bt = jnp.where(valid_bt, critic_adv_bt + values_bt, 0.0)
    return adv_bt, returns_bt
