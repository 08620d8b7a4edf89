"""Reward-model losses: Bradley-Terry on comparison pairs (outcome RM) and per-step binary
cross-entropy (process RM).

Scores are the reward model's outputs (`ScalarHeadModel.sequence_scores` for an outcome RM, the
step-end scores of `token_scores` for a process RM); the losses know nothing about models.
"""

import jax
import jax.numpy as jnp

from jaxrl_llm.losses import _checks


def bradley_terry(
    chosen_b: jax.Array,
    rejected_b: jax.Array,
    *,
    margin_b: jax.Array | None = None,
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """The Bradley-Terry pairwise loss of a reward model, with an optional margin.

    See "Training language models to follow instructions with human feedback" (InstructGPT,
    2203.02155), eq. 1, and for the margin "Llama 2: Open Foundation and Fine-Tuned Chat Models"
    (2307.09288), eq. 2:

        loss = mean_b -log sigmoid(r_chosen - r_rejected - m_b)

    A margin m_b > 0 asks the chosen score to exceed the rejected one by m_b (Llama 2 uses larger
    margins for more distinct pairs); m = 0 is the plain model.

    Args:
      chosen_b: float [B] scores of the preferred responses.
      rejected_b: float [B] scores of the other responses of the same prompts.
      margin_b: optional float [B] margins (>= 0); None is 0.

    Returns:
      `(loss, metrics)`: [] loss; metrics "accuracy" (fraction with r_chosen > r_rejected; ties
      count 0.5), "margin" (mean r_chosen - r_rejected), "chosen" and "rejected" (mean scores).

    Example:
      >>> loss, m = bradley_terry(jnp.array([2.0, 0.0]), jnp.array([0.0, 1.0]))
      >>> m["accuracy"]
      Array(0.5, dtype=float32)
    """
    fn = "bradley_terry"
    _checks.same_shape(fn, "[B]", chosen_b=chosen_b, rejected_b=rejected_b)
    diff_b = chosen_b.astype(jnp.float32) - rejected_b.astype(jnp.float32)
    shifted_b = diff_b
    if margin_b is not None:
        _checks.same_shape(fn, "[B]", chosen_b=chosen_b, margin_b=margin_b)
        shifted_b = diff_b - margin_b.astype(jnp.float32)
    loss = -jnp.mean(jax.nn.log_sigmoid(shifted_b))
    wins_b = jnp.where(diff_b > 0, 1.0, jnp.where(diff_b == 0, 0.5, 0.0))
    metrics = {
        "accuracy": jnp.mean(wins_b),
        "margin": jnp.mean(diff_b),
        "chosen": jnp.mean(chosen_b),
        "rejected": jnp.mean(rejected_b),
    }
    return loss, metrics


def step_cross_entropy(
    logits_bs: jax.Array,
    targets_bs: jax.Array,
    mask_bs: jax.Array,
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Binary cross-entropy of a process reward model's step scores against step labels.

    See "Math-Shepherd: Verify and Reinforce LLMs Step-by-step without Human Annotations"
    (2312.08935): label a step by Monte Carlo completion from its prefix, hard (1 if any
    completion reaches the right answer) or soft (the fraction that do); both are targets in
    [0, 1] here:

        loss = sum_{b,s} mask * BCE(sigmoid(logit_bs), y_bs) / sum mask

    Args:
      logits_bs: float [B, S] score logits at each step's last token.
      targets_bs: float [B, S] labels in [0, 1].
      mask_bs: bool [B, S], True at real steps.

    Returns:
      `(loss, metrics)`: [] loss (0 when no step is real); metrics "accuracy" (thresholded at
      0.5 against targets >= 0.5), "mean_score" (mean sigmoid over real steps), "steps".
    """
    fn = "step_cross_entropy"
    _checks.same_shape(fn, "[B, S]", logits_bs=logits_bs, targets_bs=targets_bs, mask_bs=mask_bs)
    mask = mask_bs.astype(jnp.float32)
    logits = logits_bs.astype(jnp.float32)
    targets = targets_bs.astype(jnp.float32)
    per_step = -(targets * jax.nn.log_sigmoid(logits) + (1 - targets) * jax.nn.log_sigmoid(-logits))
    count = jnp.sum(mask)
    denominator = jnp.maximum(count, 1.0)
    correct = ((logits > 0) == (targets >= 0.5)).astype(jnp.float32)
    metrics = {
        "accuracy": jnp.sum(correct * mask) / denominator,
        "mean_score": jnp.sum(jax.nn.sigmoid(logits) * mask) / denominator,
        "steps": count,
    }
    return jnp.sum(per_step * mask) / denominator, metrics
