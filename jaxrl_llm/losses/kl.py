"""Per-token KL estimators between the policy and a reference policy, and the KL loss term.

Tokens are sampled from the policy pi, so with `log_r = log pi_ref(y_t) - log pi(y_t)` the
estimators of KL(pi || pi_ref) from John Schulman's note "Approximating KL Divergence" are

    k1 = -log_r                  unbiased, high variance, can be negative
    k2 = 0.5 * log_r ** 2        biased, low variance, non-negative
    k3 = exp(log_r) - log_r - 1  unbiased, low variance, non-negative

See "DeepSeekMath: Pushing the Limits of Mathematical Reasoning in Open Language Models"
(2402.03300) for k3 as a loss term (GRPO).
"""

import jax
import jax.numpy as jnp

from jaxrl_llm.losses import _checks
from jaxrl_llm.losses.aggregation import aggregate

KL_ESTIMATORS = ("k1", "k2", "k3", "k1+", "k3+")

# verl's "low_var_kl" clamps: the log-ratio to [-20, 20] before exp (exp(20) ~ 4.9e8 stays finite
# in float32), and k3 to at most 10 so that one runaway token cannot dominate the batch. Outside
# the clamps the gradient is zero.
LOG_RATIO_CLAMP = 20.0
K3_CLAMP = 10.0


def kl(logp_bt: jax.Array, ref_logp_bt: jax.Array, *, estimator: str) -> jax.Array:
    """Per-token estimate of KL(pi || pi_ref) from log-probs of tokens sampled from pi.

    See "Approximating KL Divergence" (J. Schulman, 2020) and "DeepSeekMath: Pushing the Limits
    of Mathematical Reasoning in Open Language Models" (2402.03300). With
    `log_r = ref_logp - logp`:

        "k1":  -log_r
        "k2":  0.5 * log_r^2
        "k3":  min(exp(c) - c - 1, 10),  c = clip(log_r, -20, 20)   (verl "low_var_kl")
        "k1+", "k3+": value of k1 / k3, gradient of k2 (straight-through):
               k + (k2 - stop_gradient(k2)) with k = stop_gradient(k1 or k3)

    Why the straight-through variants: k1 and k3 are unbiased for the KL *value*, but their
    gradients in expectation are not the gradient of the KL; k2's gradient is
    (`d k2 / d logp = logp - ref_logp`). verl names these "k1+" / "k3+" too; TRL and OpenRLHF
    offer plain k1/k2/k3 only, and their clamps differ between versions, so ours are fixed here.

    Args:
      logp_bt: [B, T] log-probs of the sampled tokens under the policy.
      ref_logp_bt: [B, T] log-probs of the same tokens under the reference policy.
      estimator: one of `KL_ESTIMATORS`.

    Returns:
      [B, T] per-token KL estimates (unmasked; aggregate them with a mask).

    Example:
      >>> kl(jnp.log(jnp.array([[0.5]])), jnp.log(jnp.array([[0.25]])), estimator="k3")
      Array([[0.19314718]], dtype=float32)  # 0.5 - log(0.5) - 1
    """
    _checks.choice("kl", "estimator", estimator, KL_ESTIMATORS)
    _checks.same_shape("kl", axes="[B, T]", logp_bt=logp_bt, ref_logp_bt=ref_logp_bt)
    logp_bt, ref_logp_bt = _checks.floating(logp_bt, ref_logp_bt)
    log_r = ref_logp_bt - logp_bt
    k2 = 0.5 * jnp.square(log_r)
    base = estimator.rstrip("+")
    if base == "k1":
        value = -log_r
    elif base == "k2":
        value = k2
    else:
        c = jnp.clip(log_r, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
        value = jnp.minimum(jnp.exp(c) - c - 1.0, K3_CLAMP)
    if estimator.endswith("+"):
        # Forward: the k1/k3 value exactly (k2 - k2 == 0 in floating point). Backward: k2's.
        value = jax.lax.stop_gradient(value) + (k2 - jax.lax.stop_gradient(k2))
    return value


def kl_loss(
    logp_bt: jax.Array,
    ref_logp_bt: jax.Array,
    mask_bt: jax.Array,
    *,
    estimator: str = "k3",
    agg: str = "token-mean",
    norm_len: int | None = None,
    agg_count: jax.Array | None = None,
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """KL penalty as a loss term: the aggregated per-token KL to the reference policy.

    See "DeepSeekMath: Pushing the Limits of Mathematical Reasoning in Open Language Models"
    (2402.03300), eq. (4): GRPO adds `beta * D_KL` with the k3 estimator to the loss.

        loss = aggregate(kl(logp, ref_logp, estimator), mask, agg)

    The default "k3" matches verl's GRPO recipes (`kl_loss_type=low_var_kl`) and TRL's GRPO;
    multiply by beta outside.

    Args:
      logp_bt: [B, T] policy log-probs of the sampled tokens.
      ref_logp_bt: [B, T] reference log-probs of the same tokens.
      mask_bt: [B, T] mask, nonzero where a token counts.
      estimator: one of `KL_ESTIMATORS`.
      agg: aggregation mode, see `aggregate`.
      norm_len: constant divisor for "seq-mean-token-sum-norm".
      agg_count: full-batch denominator for micro-batching, see `aggregate`.

    Returns:
      `(loss, metrics)`: [] loss and {"kl": [] the same value, without gradient}.
    """
    _checks.same_shape("kl_loss", axes="[B, T]", logp_bt=logp_bt, mask_bt=mask_bt)
    kl_bt = kl(logp_bt, ref_logp_bt, estimator=estimator)
    loss = aggregate(kl_bt, mask_bt, mode=agg, norm_len=norm_len, count=agg_count)
    return loss, {"kl": jax.lax.stop_gradient(loss)}
