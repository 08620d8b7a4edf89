"""Clip-Cov: which tokens' policy gradient to drop so that entropy does not collapse.

"The Entropy Mechanism of Reinforcement Learning for Reasoning Language Models" (Cui et al.,
2025, arXiv:2505.22617) shows that under policy gradient the step's change of the policy's
entropy follows minus the covariance, over the batch's tokens, between a token's log-probability
and its advantage: confident tokens that are rewarded (and unlikely ones that are punished)
drive entropy down, and they are a small share of the tokens. Clip-Cov takes the per-token
centred product

    Cov(y_i) = (log pi(y_i) - mean_j log pi(y_j)) * (A(y_i) - mean_j A(y_j))

(means over the batch's loss tokens), and drops the policy gradient of r * N of the N loss
tokens, chosen uniformly at random among those with omega_low <= Cov <= omega_high (the paper:
r = 2e-4, omega = [1, 5] for Qwen2.5-7B at thousands of tokens per response; a batch of short
answers needs a larger r, since at least one token is always dropped when any is eligible).

KL-Cov, the paper's other remedy, penalises |log pi - log pi_old| on the top tokens: its gradient
is zero on the first update of a batch, so it acts only with several updates per rollout and is
not offered here.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxrl_llm.losses import _checks
from jaxrl_llm.losses.aggregation import masked_mean

__all__ = ["clip_cov_selection", "token_covariance"]


def token_covariance(logp_bt: jax.Array, advantages: jax.Array, mask_bt: jax.Array) -> jax.Array:
    """[B, T] per-token centred product of log-prob and advantage (Clip-Cov's Cov(y_i)).

    See "The Entropy Mechanism of Reinforcement Learning for Reasoning Language Models"
    (2505.22617): the batch covariance whose positive part drives entropy down.

    Args:
      logp_bt: [B, T] log-probs of the sampled tokens under the current policy.
      advantages: [B, T] per-token or [B] per-sequence advantages.
      mask_bt: [B, T] 1 at the loss tokens; the means are over these.

    Returns:
      [B, T] float32, 0 outside the mask. No gradient flows through it.

    Example:
      >>> token_covariance(jnp.log(jnp.array([[0.9, 0.1]])), jnp.array([[1.0, -1.0]]),
      ...                  jnp.ones((1, 2)))   # both tokens: (+-1.1) * (+-1) > 0
      Array([[1.0986123, 1.0986123]], dtype=float32)
    """
    adv_bt = _checks.per_token("token_covariance", "advantages", advantages, logp_bt, "logp_bt")
    _checks.same_shape("token_covariance", "[B, T]", logp_bt=logp_bt, mask_bt=mask_bt)
    logp_bt, adv_bt = _checks.floating(jax.lax.stop_gradient(logp_bt), adv_bt)
    mask = mask_bt.astype(logp_bt.dtype)
    centred_logp = logp_bt - masked_mean(logp_bt, mask)
    centred_adv = adv_bt - masked_mean(adv_bt, mask)
    return centred_logp * centred_adv * mask


def clip_cov_selection(
    cov_bt: jax.Array,
    mask_bt: jax.Array,
    noise_bt: jax.Array,
    *,
    fraction: float | jax.Array,
    low: float,
    high: float,
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """The tokens whose policy gradient Clip-Cov drops (module docstring).

    See "The Entropy Mechanism of Reinforcement Learning for Reasoning Language Models"
    (2505.22617), Clip-Cov.

    Of the N loss tokens, those with `low <= cov <= high` are eligible, and the
    n = max(floor(fraction * N), 1) eligible ones with the largest `noise` are chosen (all of
    them when fewer are eligible): with `noise` uniform and independent, a uniform random
    choice without replacement.

    Args:
      cov_bt: [B, T] from `token_covariance`.
      mask_bt: [B, T] 1 at the loss tokens.
      noise_bt: [B, T] i.i.d. uniform [0, 1) draws, new every step.
      fraction: r, the share of the loss tokens to drop, in (0, 1): a number, or a scalar
        array when the share adapts during a run (checked only when a number).
      low, high: the covariance window [omega_low, omega_high].

    Returns:
      (bool [B, T] the chosen tokens; metrics "eligible_fraction" and "dropped_fraction", the
      shares of the loss tokens).

    Example:
      >>> chosen, _ = clip_cov_selection(jnp.array([[0.5, 2.0, 3.0]]), jnp.ones((1, 3)),
      ...     jnp.array([[0.9, 0.1, 0.7]]), fraction=0.3, low=1.0, high=5.0)
      >>> chosen   # tokens 1 and 2 are eligible; one is chosen, the one with more noise
      Array([[False, False,  True]], dtype=bool)
    """
    _checks.same_shape(
        "clip_cov_selection", "[B, T]", cov_bt=cov_bt, mask_bt=mask_bt, noise_bt=noise_bt
    )
    bad_fraction = isinstance(fraction, int | float) and not 0 < fraction < 1
    if bad_fraction or not low < high:
        raise ValueError(
            f"clip_cov_selection: need 0 < fraction < 1 and low < high; got {fraction=}, "
            f"{low=}, {high=}."
        )
    in_loss = mask_bt > 0
    eligible = in_loss & (cov_bt >= low) & (cov_bt <= high)
    num_tokens = jnp.sum(in_loss)
    num_chosen = jnp.maximum(jnp.floor(fraction * num_tokens).astype(jnp.int32), 1)
    # Rank the eligible tokens by their noise (ineligible ones last) and keep the first n.
    priority = jnp.where(eligible, noise_bt, -1.0).reshape(-1)
    rank = jnp.argsort(jnp.argsort(-priority)).reshape(cov_bt.shape)
    chosen = eligible & (rank < num_chosen)
    denominator = jnp.maximum(num_tokens, 1)
    metrics = {
        "eligible_fraction": jnp.sum(eligible) / denominator,
        "dropped_fraction": jnp.sum(chosen) / denominator,
    }
    return chosen, metrics
