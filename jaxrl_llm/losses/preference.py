"""Preference losses on sequence log-probs: DPO (sigmoid, IPO, hinge, cDPO), KTO, SimPO, ORPO
and RRHF.

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
    weights_b: jax.Array | None = None,
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
        loss      = mean_b of the above (weighted by `weights_b` when given)

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
      weights_b: optional [B] non-negative pair weights (0 drops a pair, e.g. an online pair
        whose two completions tie); the loss and metrics are their weighted means.

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
    mean = _weighted_mean(fn, weights_b, h_b)
    return mean(losses_b), _reward_metrics(mean, chosen_b, rejected_b)


def _reward_metrics(mean, chosen_b: jax.Array, rejected_b: jax.Array) -> dict[str, jax.Array]:
    """The implicit rewards' means, margin and accuracy (chosen > rejected), no gradient."""
    metrics = {
        "chosen_rewards": mean(chosen_b),
        "rejected_rewards": mean(rejected_b),
        "reward_margin": mean(chosen_b - rejected_b),
        "reward_accuracy": mean((chosen_b > rejected_b).astype(chosen_b.dtype)),
    }
    return jax.lax.stop_gradient(metrics)


def _weighted_mean(fn: str, weights_b: jax.Array | None, like_b: jax.Array):
    """`x_b -> mean_b x` or, with weights, `sum_b w_b x_b / max(sum_b w_b, tiny)`."""
    if weights_b is None:
        return lambda x_b: x_b.mean()
    _checks.same_shape(fn, axes="[B]", weights_b=weights_b, like_b=like_b)
    w_b = jax.lax.stop_gradient(jnp.asarray(weights_b, like_b.dtype))
    total = jnp.maximum(w_b.sum(), jnp.finfo(like_b.dtype).tiny)
    return lambda x_b: (w_b * x_b).sum() / total


def kto(
    policy_logp_b: jax.Array,
    ref_logp_b: jax.Array,
    desirable_b: jax.Array,
    *,
    beta: float,
    desirable_weight: float = 1.0,
    undesirable_weight: float = 1.0,
    reference_point: jax.Array | float | None = None,
    weights_b: jax.Array | None = None,
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Kahneman-Tversky Optimization on unpaired desirable / undesirable completions.

    See "KTO: Model Alignment as Prospect Theoretic Optimization" (2402.01306), eq. (8). With
    `r = pi - ref` (the sequence log-ratio) and reference point `z0`:

        desirable:    w_d (1 - sigmoid(beta (r - z0)))
        undesirable:  w_u (1 - sigmoid(beta (z0 - r)))
        loss        = mean_b of the above

    The paper estimates `z0 = max(0, KL(pi || ref))` from mismatched (prompt, completion)
    pairs of the batch; pass such an estimate as `reference_point`. None uses the batch's own
    `max(0, mean_b r)`, a cheaper (biased upward) estimate. `z0` carries no gradient.

    Args:
      policy_logp_b: [B] policy log-prob of each completion.
      ref_logp_b: [B] reference log-prob of each completion.
      desirable_b: [B] bool, True for a desirable completion.
      beta: inverse temperature, > 0.
      desirable_weight, undesirable_weight: w_d and w_u (the paper balances them so that
        w_d n_d / (w_u n_u) is in [1, 4/3]).
      reference_point: z0, a scalar; None estimates it from the batch.
      weights_b: optional [B] completion weights (see `dpo`); the batch estimate of z0 uses
        them too.

    Returns:
      `(loss, metrics)`: metrics "reference_point", "desirable_rewards" and
      "undesirable_rewards" (mean `beta r` over each kind; 0 when the batch has none).
    """
    fn = "kto"
    if not beta > 0:
        raise ValueError(f"{fn}: beta={beta} must be > 0")
    _checks.same_shape(
        fn, axes="[B]", policy_logp_b=policy_logp_b, ref_logp_b=ref_logp_b, desirable_b=desirable_b
    )
    pi, ref = _checks.floating(policy_logp_b, ref_logp_b)
    r_b = pi - jax.lax.stop_gradient(ref)
    mean = _weighted_mean(fn, weights_b, r_b)
    if reference_point is None:
        z0 = jnp.maximum(mean(r_b), 0.0)
    else:
        z0 = jnp.maximum(jnp.asarray(reference_point, r_b.dtype), 0.0)
    z0 = jax.lax.stop_gradient(z0)
    good_b = jnp.asarray(desirable_b, bool)
    losses_b = jnp.where(
        good_b,
        desirable_weight * (1.0 - jax.nn.sigmoid(beta * (r_b - z0))),
        undesirable_weight * (1.0 - jax.nn.sigmoid(beta * (z0 - r_b))),
    )

    w_b = jnp.ones_like(r_b) if weights_b is None else jnp.asarray(weights_b, r_b.dtype)

    def mean_where(x_b, where_b):
        kept_b = jnp.where(where_b, w_b, 0.0)
        return (kept_b * x_b).sum() / jnp.maximum(kept_b.sum(), jnp.finfo(r_b.dtype).tiny)

    metrics = {
        "reference_point": z0,
        "desirable_rewards": mean_where(beta * r_b, good_b),
        "undesirable_rewards": mean_where(beta * r_b, ~good_b),
    }
    return mean(losses_b), jax.lax.stop_gradient(metrics)


def _mean_token_logps(fn: str, pc_b, pr_b, nc_b, nr_b) -> tuple[jax.Array, jax.Array]:
    """Mean token log-probs of chosen and rejected completions ([B] sums over [B] lengths, a
    length below 1 counted as 1), shapes checked."""
    _checks.same_shape(
        fn,
        axes="[B]",
        policy_chosen_logp_b=pc_b,
        policy_rejected_logp_b=pr_b,
        chosen_tokens_b=nc_b,
        rejected_tokens_b=nr_b,
    )
    pc, pr = _checks.floating(pc_b, pr_b)
    return (
        pc / jnp.maximum(jnp.asarray(nc_b, pc.dtype), 1.0),
        pr / jnp.maximum(jnp.asarray(nr_b, pr.dtype), 1.0),
    )


def simpo(
    policy_chosen_logp_b: jax.Array,
    policy_rejected_logp_b: jax.Array,
    chosen_tokens_b: jax.Array,
    rejected_tokens_b: jax.Array,
    *,
    beta: float = 2.0,
    gamma: float = 0.5,
    label_smoothing: float = 0.0,
    weights_b: jax.Array | None = None,
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """SimPO: a reference-free margin loss on length-normalised log-probs.

    See "SimPO: Simple Preference Optimization with a Reference-Free Reward" (2405.14734),
    eq. (6). With the implicit reward `s = beta * logp / |y|` (mean token log-prob):

        h    = s_chosen - s_rejected - gamma
        loss = mean_b [ -(1 - e) log sigmoid(h) - e log sigmoid(-h) ]

    Args:
      policy_chosen_logp_b, policy_rejected_logp_b: [B] summed log-probs of each completion.
      chosen_tokens_b, rejected_tokens_b: [B] completion lengths in tokens (>= 1 counted).
      beta: reward scale (the paper uses 2.0-10.0), > 0.
      gamma: target reward margin (the paper's gamma, 0.5-1.5).
      label_smoothing: as cDPO's, in [0, 0.5).
      weights_b: optional [B] pair weights (see `dpo`).

    Returns:
      `(loss, metrics)`: metrics "chosen_rewards", "rejected_rewards", "reward_margin" and
      "reward_accuracy" of the length-normalised rewards.
    """
    fn = "simpo"
    if not beta > 0:
        raise ValueError(f"{fn}: beta={beta} must be > 0")
    if not 0.0 <= label_smoothing < 0.5:
        raise ValueError(f"{fn}: label_smoothing={label_smoothing} must be in [0, 0.5)")
    mean_c, mean_r = _mean_token_logps(
        fn, policy_chosen_logp_b, policy_rejected_logp_b, chosen_tokens_b, rejected_tokens_b
    )
    chosen_b, rejected_b = beta * mean_c, beta * mean_r
    h_b = chosen_b - rejected_b - gamma
    losses_b = -(1.0 - label_smoothing) * jax.nn.log_sigmoid(h_b) - (
        label_smoothing * jax.nn.log_sigmoid(-h_b)
    )
    mean = _weighted_mean(fn, weights_b, h_b)
    return mean(losses_b), _reward_metrics(mean, chosen_b, rejected_b)


def orpo(
    policy_chosen_logp_b: jax.Array,
    policy_rejected_logp_b: jax.Array,
    chosen_tokens_b: jax.Array,
    rejected_tokens_b: jax.Array,
    *,
    lam: float = 0.1,
    weights_b: jax.Array | None = None,
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """ORPO: fine-tuning on the chosen completion plus an odds-ratio preference term.

    See "ORPO: Monolithic Preference Optimization without Reference Model" (2403.07691),
    eqs. (6)-(7). With the mean token log-prob `l = logp / |y|` and `log odds(y) = l -
    log(1 - exp(l))`:

        L_SFT = -l_chosen
        L_OR  = -log sigmoid(log odds(chosen) - log odds(rejected))
        loss  = mean_b (L_SFT + lam L_OR)

    Args:
      policy_chosen_logp_b, policy_rejected_logp_b: [B] summed log-probs of each completion.
      chosen_tokens_b, rejected_tokens_b: [B] completion lengths in tokens (>= 1 counted).
      lam: weight of the odds-ratio term (the paper's lambda, 0.1), >= 0.
      weights_b: optional [B] pair weights (see `dpo`).

    Returns:
      `(loss, metrics)`: metrics "sft_loss", "odds_ratio_loss", "log_odds_ratio" and
      "reward_accuracy" (fraction with the higher odds on the chosen completion).
    """
    fn = "orpo"
    if not lam >= 0:
        raise ValueError(f"{fn}: lam={lam} must be >= 0")
    mean_c, mean_r = _mean_token_logps(
        fn, policy_chosen_logp_b, policy_rejected_logp_b, chosen_tokens_b, rejected_tokens_b
    )

    def log_odds(l_b):  # log(p / (1 - p)) with log p = l_b < 0
        return l_b - jnp.log(-jnp.expm1(jnp.minimum(l_b, -1e-6)))

    ratio_b = log_odds(mean_c) - log_odds(mean_r)
    or_b = -jax.nn.log_sigmoid(ratio_b)
    sft_b = -mean_c
    mean = _weighted_mean(fn, weights_b, ratio_b)
    metrics = {
        "sft_loss": mean(sft_b),
        "odds_ratio_loss": mean(or_b),
        "log_odds_ratio": mean(ratio_b),
        "reward_accuracy": mean((ratio_b > 0).astype(ratio_b.dtype)),
    }
    return mean(sft_b + lam * or_b), jax.lax.stop_gradient(metrics)


def rrhf(
    logp_bgt: jax.Array,
    mask_bgt: jax.Array,
    rewards_bg: jax.Array,
    *,
    rank_weight: float = 1.0,
    length_penalty: float = 1.0,
    ft_on_ties: bool = True,
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """RRHF: rank the G responses of each prompt by reward, plus fine-tuning on the best one.

    See "RRHF: Rank Responses to Align Language Models with Human Feedback without tears"
    (2304.05302), eqs. (1)-(4). For prompt b with responses i = 1..G of n_i tokens:

        p_i     = sum_t m_it logp_it / n_i^length_penalty           (length-normalised score)
        L_rank  = sum_{i, j : r_i < r_j} max(0, p_i - p_j)
        L_ft    = -(1 / n_k) sum_t m_kt logp_kt,   k = argmax_i r_i  (first one on ties)
        loss    = mean_b (rank_weight * L_rank + L_ft)

    `rank_weight` is the official code's `rrhf_weight`. Its fine-tuning term averages the best
    response's token log-probs over the padded length; here over its valid tokens. The paper's
    candidates include a reference response, so a best one exists; among policy samples alone a
    group whose rewards all tie has none, and `ft_on_ties=False` drops L_ft there (fine-tuning
    on an arbitrary, e.g. wrong, sample of such groups collapsed SmolLM2 to one-token answers).

    Args:
      logp_bgt: [B, G, T] token log-probs of G responses per prompt under the policy.
      mask_bgt: [B, G, T] mask, nonzero on response tokens.
      rewards_bg: [B, G] reward of each response.
      rank_weight: weight of the ranking term.
      length_penalty: exponent of the length normalisation of the scores.
      ft_on_ties: keep the fine-tuning term of groups whose rewards are all equal.

    Returns:
      `(loss, metrics)`: [] loss; metrics has "rank_loss" and "ft_loss" (means over prompts)
      and "ft_groups" (the fraction of groups with a fine-tuning term).
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
    has_best_b = jnp.ones_like(ft_b)
    if not ft_on_ties:
        has_best_b = (rewards_bg.max(-1) > rewards_bg.min(-1)).astype(ft_b.dtype)
    ft_b = ft_b * has_best_b
    loss = (rank_weight * rank_b + ft_b).mean()
    metrics = {"rank_loss": rank_b.mean(), "ft_loss": ft_b.mean(), "ft_groups": has_best_b.mean()}
    return loss, jax.lax.stop_gradient(metrics)
