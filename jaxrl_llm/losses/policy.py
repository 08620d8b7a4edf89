"""Policy-gradient losses: PPO clip (with DAPO clip-higher and dual clip), GSPO, CISPO,
REINFORCE, and the entropy bonus.

Every loss takes per-token log-probs of the sampled tokens, `[B, T]`, a mask, and advantages
either per token `[B, T]` or per sequence `[B]` (broadcast over T here). It returns
`(loss, metrics)`: the loss is minimised, the metrics are scalars without gradient.

Ratios are `exp(logp - old_logp)` with the log-ratio clamped to [-20, 20] first (verl's
convention: exp(20) stays finite in float32; the gradient is zero beyond the clamp).
"""

import jax
import jax.numpy as jnp

from jaxrl_llm.losses import _checks
from jaxrl_llm.losses.aggregation import aggregate, masked_mean
from jaxrl_llm.losses.ratios import (
    LOG_RATIO_CLAMP,
    Metrics,
    clipped_weight_pg,
    masked_min_max,
    prepare_pg_inputs,
    ratio_metrics,
)


def ppo_clip(
    logp_bt: jax.Array,
    old_logp_bt: jax.Array,
    adv_bt: jax.Array,
    mask_bt: jax.Array,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip: float | None = None,
    agg: str = "token-mean",
    norm_len: int | None = None,
    agg_count: jax.Array | None = None,
    is_weights_bt: jax.Array | None = None,
) -> tuple[jax.Array, Metrics]:
    """PPO clipped surrogate loss, with DAPO's decoupled clip range and optional dual clip.

    See "Proximal Policy Optimization Algorithms" (1707.06347), "DAPO: An Open-Source LLM
    Reinforcement Learning System at Scale" (2503.14476) for clip-higher, and "Mastering Complex
    Control in MOBA Games with Deep Reinforcement Learning" (1912.09729) for the dual clip.

        r_t    = exp(logp_t - old_logp_t)
        l_t    = max(-A_t r_t, -A_t clip(r_t, 1 - clip_low, 1 + clip_high))
        l_t    = min(l_t, -A_t dual_clip)   where A_t < 0, if dual_clip is set
        l_t   *= w_t                        if is_weights_bt is set (TIS / IcePop / AIPO weights)
        loss   = aggregate(l, mask, agg)

    Conventions: dual clip is off by default (TRL, OpenRLHF's default); verl turns it on with
    `clip_ratio_c=3.0`, so pass `dual_clip=3.0` to match verl. Clip fractions are token means over
    the mask whatever `agg` is (as in verl).

    Args:
      logp_bt: [B, T] log-probs of the sampled tokens under the current policy.
      old_logp_bt: [B, T] log-probs under the policy that the ratio is taken against.
      adv_bt: [B, T] per-token advantages, or [B] per-sequence advantages broadcast over T.
      mask_bt: [B, T] mask, nonzero where a token counts.
      clip_low: epsilon of the lower clip, `1 - clip_low`.
      clip_high: epsilon of the upper clip, `1 + clip_high` (DAPO uses 0.28).
      dual_clip: the constant c > 1 of dual-clip PPO, or None to disable it.
      agg: aggregation mode, see `aggregate`.
      norm_len: constant divisor for "seq-mean-token-sum-norm".
      agg_count: full-batch denominator for micro-batching, see `aggregate`.
      is_weights_bt: [B, T] optional per-token importance weights (no gradient), e.g. from
        `importance_weights`, multiplied into the per-token loss after clipping.

    Returns:
      `(loss, metrics)`: [] loss; metrics has "clipfrac" (any clip active), "clipfrac_high"
      (r > 1 + clip_high with A > 0), "clipfrac_low" (r < 1 - clip_low with A < 0),
      "clipfrac_dual" (dual clip active), and `ratio_metrics`.

    Example:
      >>> loss, m = ppo_clip(logp_bt, old_logp_bt, adv_b, mask_bt, clip_high=0.28)
    """
    fn = "ppo_clip"
    if dual_clip is not None and dual_clip <= 1.0:
        raise ValueError(f"{fn}: dual_clip={dual_clip} must be > 1 (or None)")
    logp_bt, old_logp_bt, adv_bt, is_weights_bt = prepare_pg_inputs(
        fn, logp_bt, old_logp_bt, adv_bt, mask_bt, is_weights_bt
    )
    log_ratio_bt = jnp.clip(logp_bt - old_logp_bt, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    ratio_bt = jnp.exp(log_ratio_bt)
    loss_unclipped = -adv_bt * ratio_bt
    loss_clipped = -adv_bt * jnp.clip(ratio_bt, 1.0 - clip_low, 1.0 + clip_high)
    loss_bt = jnp.maximum(loss_unclipped, loss_clipped)
    clipped_bt = loss_clipped > loss_unclipped
    if dual_clip is not None:
        loss_dual = -adv_bt * dual_clip
        dual_bt = (adv_bt < 0) & (loss_bt > loss_dual)
        loss_bt = jnp.where(adv_bt < 0, jnp.minimum(loss_bt, loss_dual), loss_bt)
    else:
        dual_bt = jnp.zeros_like(clipped_bt)
    if is_weights_bt is not None:
        loss_bt = loss_bt * is_weights_bt
    loss = aggregate(loss_bt, mask_bt, mode=agg, norm_len=norm_len, count=agg_count)
    metrics = {
        "clipfrac": masked_mean(clipped_bt, mask_bt),
        "clipfrac_high": masked_mean(clipped_bt & (adv_bt > 0), mask_bt),
        "clipfrac_low": masked_mean(clipped_bt & (adv_bt < 0), mask_bt),
        "clipfrac_dual": masked_mean(dual_bt, mask_bt),
        **ratio_metrics(log_ratio_bt, mask_bt),
    }
    return loss, jax.lax.stop_gradient(metrics)


def gspo(
    logp_bt: jax.Array,
    old_logp_bt: jax.Array,
    adv_bt: jax.Array,
    mask_bt: jax.Array,
    *,
    clip_low: float = 3e-4,
    clip_high: float = 4e-4,
    agg: str = "seq-mean-token-mean",
    norm_len: int | None = None,
    agg_count: jax.Array | None = None,
) -> tuple[jax.Array, Metrics]:
    """GSPO: PPO clipping on the length-normalised sequence ratio, in its token form.

    See "Group Sequence Policy Optimization" (2507.18071), eqs. (5)-(7) and GSPO-token (13)-(14):

        s_i    = exp( (1/|y_i|) sum_t (logp_it - old_logp_it) )
        s_it   = sg(s_i) * exp(logp_it - sg(logp_it))        (value s_i, gradient s_i grad logp_it)
        l_it   = max(-A_it s_it, -A_it clip(s_it, 1 - clip_low, 1 + clip_high))
        loss   = aggregate(l, mask, agg)

    With a per-sequence advantage and the default "seq-mean-token-mean", the value and the
    gradient equal the sequence-level GSPO objective `mean_i max(-A_i s_i, -A_i clip(s_i))`.
    Defaults are the paper's clip ranges (3e-4, 4e-4); verl's "gspo" loss is the same form.

    Args:
      logp_bt: [B, T] log-probs of the sampled tokens under the current policy.
      old_logp_bt: [B, T] log-probs under the policy that sampled them.
      adv_bt: [B, T] per-token advantages, or [B] per-sequence advantages broadcast over T.
      mask_bt: [B, T] mask, nonzero where a token counts.
      clip_low: lower clip epsilon on s_i.
      clip_high: upper clip epsilon on s_i.
      agg: aggregation mode; keep "seq-mean-token-mean" for the paper's objective.
      norm_len: constant divisor for "seq-mean-token-sum-norm".
      agg_count: full-batch denominator for micro-batching, see `aggregate`.

    Returns:
      `(loss, metrics)`: [] loss; metrics has "clipfrac" (tokens of clipped sequences),
      "seq_ratio_mean", "seq_ratio_min", "seq_ratio_max" over non-empty sequences, and
      `ratio_metrics` of the token ratios.
    """
    fn = "gspo"
    logp_bt, old_logp_bt, adv_bt, _ = prepare_pg_inputs(
        fn, logp_bt, old_logp_bt, adv_bt, mask_bt, None
    )
    valid_bt = mask_bt > 0
    tokens_b = valid_bt.sum(-1)
    token_log_ratio_bt = logp_bt - old_logp_bt
    seq_log_ratio_b = jnp.where(valid_bt, token_log_ratio_bt, 0.0).sum(-1) / jnp.maximum(
        tokens_b, 1
    )
    log_s_bt = jax.lax.stop_gradient(seq_log_ratio_b)[:, None] + (
        logp_bt - jax.lax.stop_gradient(logp_bt)
    )
    s_bt = jnp.exp(jnp.clip(log_s_bt, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))
    loss_unclipped = -adv_bt * s_bt
    loss_clipped = -adv_bt * jnp.clip(s_bt, 1.0 - clip_low, 1.0 + clip_high)
    loss_bt = jnp.maximum(loss_unclipped, loss_clipped)
    loss = aggregate(loss_bt, mask_bt, mode=agg, norm_len=norm_len, count=agg_count)

    s_b = jnp.exp(jax.lax.stop_gradient(seq_log_ratio_b))
    seq_mask_b = tokens_b > 0
    lo, hi = masked_min_max(s_b, seq_mask_b)
    metrics = {
        "clipfrac": masked_mean(loss_clipped > loss_unclipped, mask_bt),
        "seq_ratio_mean": masked_mean(s_b, seq_mask_b),
        "seq_ratio_min": lo,
        "seq_ratio_max": hi,
        **ratio_metrics(token_log_ratio_bt, mask_bt),
    }
    return loss, jax.lax.stop_gradient(metrics)


def cispo(
    logp_bt: jax.Array,
    old_logp_bt: jax.Array,
    adv_bt: jax.Array,
    mask_bt: jax.Array,
    *,
    clip_low: float | None = None,
    clip_high: float = 0.28,
    agg: str = "token-mean",
    norm_len: int | None = None,
    agg_count: jax.Array | None = None,
) -> tuple[jax.Array, Metrics]:
    """CISPO: REINFORCE with a clipped, stop-gradient importance-sampling weight.

    See "MiniMax-M1: Scaling Test-Time Compute Efficiently with Lightning Attention"
    (2506.13585), eqs. (4)-(5):

        r_t  = exp(logp_t - old_logp_t)
        l_t  = -sg(clip(r_t, 1 - clip_low, 1 + clip_high)) A_t logp_t
        loss = (1 / sum_i |o_i|) sum_it m_it l_it        ("token-mean", the paper's normaliser)

    The paper sets no lower bound and tunes only the upper one; `clip_low=None` does that. The
    default `clip_high=0.28` is DAPO's eps_high, our choice (the paper gives no number). The loss
    value is the paper's surrogate `-w A logp`; only its gradient is meaningful.

    Args:
      logp_bt: [B, T] log-probs of the sampled tokens under the current policy.
      old_logp_bt: [B, T] log-probs under the policy that sampled them.
      adv_bt: [B, T] per-token advantages, or [B] per-sequence advantages broadcast over T.
      mask_bt: [B, T] mask, nonzero where a token counts.
      clip_low: lower epsilon of the weight (`1 - clip_low`), or None for no lower bound.
      clip_high: upper epsilon of the weight (`1 + clip_high`).
      agg: aggregation mode, see `aggregate`.
      norm_len: constant divisor for "seq-mean-token-sum-norm".
      agg_count: full-batch denominator for micro-batching, see `aggregate`.

    Returns:
      `(loss, metrics)`: [] loss; metrics has "clipfrac_high", "clipfrac_low" (fractions of
      tokens whose weight was clipped) and `ratio_metrics`.
    """
    return clipped_weight_pg(
        "cispo",
        logp_bt,
        old_logp_bt,
        adv_bt,
        mask_bt,
        low=None if clip_low is None else 1.0 - clip_low,
        high=1.0 + clip_high,
        agg=agg,
        norm_len=norm_len,
        agg_count=agg_count,
    )


def reinforce(
    logp_bt: jax.Array,
    adv_bt: jax.Array,
    mask_bt: jax.Array,
    *,
    agg: str = "token-mean",
    norm_len: int | None = None,
    agg_count: jax.Array | None = None,
    is_weights_bt: jax.Array | None = None,
) -> tuple[jax.Array, Metrics]:
    """REINFORCE (score-function) loss, for RLOO, ReMax and REINFORCE++ advantages.

    See "Simple Statistical Gradient-Following Algorithms for Connectionist Reinforcement
    Learning" (Williams, 1992), "ReMax" (2310.10505), "Back to Basics: Revisiting REINFORCE Style
    Optimization for Learning from Human Feedback in LLMs" (2402.14740):

        l_t  = -w_t A_t logp_t            (w_t = 1 without is_weights_bt)
        loss = aggregate(l, mask, agg)

    On-policy, with no ratio and no clipping. For several updates on one batch use `ppo_clip`
    with these advantages (what verl and OpenRLHF do for "rloo", "remax", "reinforce_plus_plus").

    Args:
      logp_bt: [B, T] log-probs of the sampled tokens under the current policy.
      adv_bt: [B, T] per-token advantages, or [B] per-sequence advantages broadcast over T.
      mask_bt: [B, T] mask, nonzero where a token counts.
      agg: aggregation mode, see `aggregate`.
      norm_len: constant divisor for "seq-mean-token-sum-norm".
      agg_count: full-batch denominator for micro-batching, see `aggregate`.
      is_weights_bt: [B, T] optional importance weights (no gradient).

    Returns:
      `(loss, metrics)`: [] loss; metrics has "adv_mean" and "logp_mean" over valid tokens.
    """
    fn = "reinforce"
    logp_bt, _, adv_bt, is_weights_bt = prepare_pg_inputs(
        fn, logp_bt, logp_bt, adv_bt, mask_bt, is_weights_bt
    )
    loss_bt = -adv_bt * logp_bt
    if is_weights_bt is not None:
        loss_bt = loss_bt * is_weights_bt
    loss = aggregate(loss_bt, mask_bt, mode=agg, norm_len=norm_len, count=agg_count)
    metrics = {"adv_mean": masked_mean(adv_bt, mask_bt), "logp_mean": masked_mean(logp_bt, mask_bt)}
    return loss, jax.lax.stop_gradient(metrics)


def entropy_bonus(
    entropy_bt: jax.Array,
    mask_bt: jax.Array,
    *,
    agg: str = "token-mean",
    norm_len: int | None = None,
    agg_count: jax.Array | None = None,
) -> tuple[jax.Array, Metrics]:
    """Entropy bonus as a loss to minimise: the negated aggregated token entropy.

    See "Asynchronous Methods for Deep Reinforcement Learning" (1602.01783) for the entropy
    regulariser; the entropies `H_t = -sum_v p_tv log p_tv` are computed elsewhere (from float32
    logits, or by a fused kernel) and passed in.

        loss = -aggregate(H, mask, agg)

    Multiply by the coefficient outside (verl's `entropy_coeff`, OpenRLHF's `entropy_loss_coef`);
    the gradient flows into `entropy_bt`.

    Args:
      entropy_bt: [B, T] per-token entropies of the policy.
      mask_bt: [B, T] mask, nonzero where a token counts.
      agg: aggregation mode, see `aggregate`.
      norm_len: constant divisor for "seq-mean-token-sum-norm".
      agg_count: full-batch denominator for micro-batching, see `aggregate`.

    Returns:
      `(loss, metrics)`: [] loss and {"entropy": [] the aggregated entropy}.
    """
    _checks.same_shape("entropy_bonus", axes="[B, T]", entropy_bt=entropy_bt, mask_bt=mask_bt)
    entropy = aggregate(entropy_bt, mask_bt, mode=agg, norm_len=norm_len, count=agg_count)
    return -entropy, {"entropy": jax.lax.stop_gradient(entropy)}
