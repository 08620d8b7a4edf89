"""Preference losses on sequence log-probs: DPO (sigmoid, IPO, hinge) and RRHF.

Sequence log-probs are sums of token log-probs over the response (a `[B, T]` array reduced with
its mask); reduce them before calling, e.g. `(logp_bt * mask_bt).sum(-1)`.
"""

import chex
import jax
import jax.numpy as jnp

from jaxrl_llm.losses import _checks

DPO_LOSS_TYPES = ("sigmoid", "ipo", "hinge")


def dpo(
    policy_chosen_logp_b: jax.Array,
    policy_rejected_logp_b: jax.Array,
    ref_chosen_logp_b: jax.Array,
    ref_rejected_logp_b: jax.Array,
    *,
    beta: float,
    loss_type: str = "sigmoid",
    label_smoothing: float = 0.0,
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Direct Preference Optimization and its IPO and hinge variants.

    See "Direct Preference Optimization: Your Language Model is Secretly a Reward Model"
    (2305.18290), "A General Theoretical Paradigm to Understand Learning from Human Preferences"
    (2310.12036) for IPO, and "SLiC-HF: Sequence Likelihood Calibration with Human Feedback"
    (2305.10425) for the hinge loss. With
    `h = (pi_c - pi_r) - (ref_c - ref_r)` (log-ratio margin) and label smoothing `e`:

        "sigmoid":  -(1 - e) log sigmoid(beta h) - e log sigmoid(-beta h)   (cDPO when e > 0)
        "ipo":      (h - 1 / (2 beta))^2
        "hinge":    max(0, 1 - beta h)
        loss      = mean_b of the above

    These are TRL's `DPOTrainer` formulas term for term. As in TRL, IPO is meant for *average*
    per-token log-probs (pass `sum / length`); the other types take summed log-probs.
    `label_smoothing` applies to "sigmoid" only and must be in [0, 0.5).

    Args:
      policy_chosen_logp_b: [B] policy log-prob of each chosen response.
      policy_rejected_logp_b: [B] policy log-prob of each rejected response.
      ref_chosen_logp_b: [B] reference log-prob of each chosen response.
      ref_rejected_logp_b: [B] reference log-prob of each rejected response.
      beta: inverse temperature (sigmoid, hinge) or regularisation strength (IPO), > 0.
      loss_type: one of `DPO_LOSS_TYPES`.
      label_smoothing: probability that a preference label is flipped (conservative DPO).

    Returns:
      `(loss, metrics)`: [] loss; metrics has "chosen_rewards" and "rejected_rewards"
      (mean of `beta * (pi - ref)`), "reward_margin" and "reward_accuracy" (fraction with
      chosen reward > rejected reward).

    Example:
      >>> loss, m = dpo(pc_b, pr_b, rc_b, rr_b, beta=0.1)
    """
    fn = "dpo"
    _checks.choice(fn, "loss_type", loss_type, DPO_LOSS_TYPES)
    if not beta > 0:
        raise ValueError(f"{fn}: beta={beta} must be > 0")
    if loss_type != "sigmoid" and label_smoothing != 0.0:
        raise ValueError(
            f"{fn}: label_smoothing={label_smoothing} is only used by loss_type='sigmoid'"
        )
    if not 0.0 <= label_smoothing < 0.5:
        raise ValueError(f"{fn}: label_smoothing={label_smoothing} must be in [0, 0.5)")
    _checks.same_shape(
        fn,
        axes="[B]",
        policy_chosen_logp_b=policy_chosen_logp_b,
        policy_rejected_logp_b=policy_rejected_logp_b,
        ref_chosen_logp_b=ref_chosen_logp_b,
        ref_rejected_logp_b=ref_rejected_logp_b,
    )
    pc, pr, rc, rr = _checks.floating(
        policy_chosen_logp_b, policy_rejected_logp_b, ref_chosen_logp_b, ref_rejected_logp_b
    )
    rc, rr = jax.lax.stop_gradient(rc), jax.lax.stop_gradient(rr)
    h_b = (pc - pr) - (rc - rr)
    if loss_type == "sigmoid":
        losses_b = -(1.0 - label_smoothing) * jax.nn.log_sigmoid(beta * h_b) - (
            label_smoothing * jax.nn.log_sigmoid(-beta * h_b)
        )
    elif loss_type == "ipo":
        losses_b = jnp.square(h_b - 1.0 / (2.0 * beta))
    else:  # "hinge"
        losses_b = jax.nn.relu(1.0 - beta * h_b)
    chosen_b = beta * (pc - rc)
    rejected_b = beta * (pr - rr)
    metrics = {
        "chosen_rewards": chosen_b.mean(),
        "rejected_rewards": rejected_b.mean(),
        "reward_margin": (chosen_b - rejected_b).mean(),
        "reward_accuracy": (chosen_b > rejected_b).astype(h_b.dtype).mean(),
    }
    return losses_b.mean(), jax.lax.stop_gradient(metrics)


def rrhf(
    logp_bgt: jax.Array,
    mask_bgt: jax.Array,
    rewards_bg: jax.Array,
    *,
    rank_weight: float = 1.0,
    length_penalty: float = 1.0,
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """RRHF: rank the G responses of each prompt by reward, plus fine-tuning on the best one.

    See "RRHF: Rank Responses to Align Language Models with Human Feedback without tears"
    (2304.05302), eqs. (1)-(4). For prompt b with responses i = 1..G of n_i tokens:

        p_i     = sum_t m_it logp_it / n_i^length_penalty           (length-normalised score)
        L_rank  = sum_{i, j : r_i < r_j} max(0, p_i - p_j)
        L_ft    = -(1 / n_k) sum_t m_kt logp_kt,   k = argmax_i r_i  (first one on ties)
        loss    = mean_b (rank_weight * L_rank + L_ft)

    `rank_weight` is the official code's `rrhf_weight`. Its fine-tuning term averages the best
    response's token log-probs over the padded length; here over its valid tokens.

    Args:
      logp_bgt: [B, G, T] token log-probs of G responses per prompt under the policy.
      mask_bgt: [B, G, T] mask, nonzero on response tokens.
      rewards_bg: [B, G] reward of each response.
      rank_weight: weight of the ranking term.
      length_penalty: exponent of the length normalisation of the scores.

    Returns:
      `(loss, metrics)`: [] loss; metrics has "rank_loss" and "ft_loss" (means over prompts).
    """
    fn = "rrhf"
    _checks.same_shape(fn, axes="[B, G, T]", logp_bgt=logp_bgt, mask_bgt=mask_bgt)
    _checks.same_shape(fn, axes="[B, G]", rewards_bg=rewards_bg)
    chex.assert_equal_shape_prefix(
        [logp_bgt, rewards_bg],
        2,
        custom_message=f"{fn}: rewards_bg {rewards_bg.shape} must be the [B, G] of logp_bgt {logp_bgt.shape}",
    )
    logp_bgt, rewards_bg = _checks.floating(logp_bgt, jax.lax.stop_gradient(rewards_bg))
    valid_bgt = mask_bgt > 0
    tokens_bg = jnp.maximum(valid_bgt.sum(-1), 1).astype(logp_bgt.dtype)
    sum_logp_bg = jnp.where(valid_bgt, logp_bgt, 0.0).sum(-1)
    scores_bg = sum_logp_bg / tokens_bg**length_penalty
    # pairs[b, i, j] is true where response i has a lower reward than response j.
    worse_bij = rewards_bg[:, :, None] < rewards_bg[:, None, :]
    gap_bij = jax.nn.relu(scores_bg[:, :, None] - scores_bg[:, None, :])
    rank_b = jnp.where(worse_bij, gap_bij, 0.0).sum((1, 2))
    best_b = jnp.argmax(rewards_bg, axis=-1)
    ft_b = -jnp.take_along_axis(sum_logp_bg / tokens_bg, best_b[:, None], axis=-1)[:, 0]
    loss = (rank_weight * rank_b + ft_b).mean()
    return loss, jax.lax.stop_gradient({"rank_loss": rank_b.mean(), "ft_loss": ft_b.mean()})
