"""Process rewards: splitting a completion into steps, and the reward refinements that stop a
policy from farming a process reward model by adding steps.

See "On Designing Effective RL Reward at Training Time for LLM Reasoning" (Gao et al. 2024,
2410.15115). A PRM scores every step; summed as dense rewards, a policy can raise its return by
repeating correct-looking steps. Both refinements bound the return of any trajectory:

  Clip   r'_k = min(r_k - eta, 0): every step reward is <= 0, so an extra step never adds
         return (eta sets which steps count as good enough to cost nothing).
  Delta  r'_k = r_k - r_{k+1} for k < K, r'_K = 0: the return from step t telescopes to
         r_t - r_K, bounded by the PRM's range whatever K is.

The verifier's (success) reward is added at the last token separately. Rewards are padded
[B, S] arrays with a step mask (the first K_b entries of row b are its steps).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxrl_llm.losses import _checks

REFINEMENTS = ("none", "clip", "delta")


def split_steps(text: str, marker: str = "\n") -> list[tuple[int, int]]:
    """Character spans [start, end) of the steps of `text`, split on `marker`.

    A step ends with its marker (included), the last one at the end of the text; steps that are
    only whitespace are dropped. A process reward model scores each step at its last token.

    Example:
      >>> split_steps("3 + 4 = 7\\n7 * 2 = 14\\n\\nAnswer: 14")
      [(0, 10), (10, 21), (22, 32)]
    """
    if not marker:
        raise ValueError("split_steps: marker must be a non-empty string (e.g. '\\n').")
    spans, start = [], 0
    while start < len(text):
        found = text.find(marker, start)
        end = len(text) if found < 0 else found + len(marker)
        if text[start:end].strip():
            spans.append((start, end))
        start = end
    return spans


def clip_rewards(rewards_bs: jax.Array, mask_bs: jax.Array, *, eta: float) -> jax.Array:
    """Clip mechanism: min(r - eta, 0) at real steps, 0 elsewhere. float32 [B, S]."""
    _checks.same_shape("clip_rewards", "[B, S]", rewards_bs=rewards_bs, mask_bs=mask_bs)
    clipped = jnp.minimum(rewards_bs.astype(jnp.float32) - eta, 0.0)
    return jnp.where(mask_bs, clipped, 0.0)


def delta_rewards(rewards_bs: jax.Array, mask_bs: jax.Array) -> jax.Array:
    """Delta mechanism: r_k - r_{k+1} where step k + 1 is real, 0 at the last step and at
    padding. float32 [B, S]."""
    _checks.same_shape("delta_rewards", "[B, S]", rewards_bs=rewards_bs, mask_bs=mask_bs)
    rewards = jnp.where(mask_bs, rewards_bs.astype(jnp.float32), 0.0)
    following = jnp.pad(rewards[:, 1:], ((0, 0), (0, 1)))
    has_next = jnp.pad(mask_bs[:, 1:], ((0, 0), (0, 1)))
    return jnp.where(mask_bs & has_next, rewards - following, 0.0)


def refine_rewards(
    rewards_bs: jax.Array, mask_bs: jax.Array, *, refinement: str, eta: float = 0.0
) -> jax.Array:
    """`rewards_bs` as they are ("none", padding zeroed), clipped or delta'd. float32 [B, S]."""
    if refinement == "clip":
        return clip_rewards(rewards_bs, mask_bs, eta=eta)
    if refinement == "delta":
        return delta_rewards(rewards_bs, mask_bs)
    if refinement == "none":
        return jnp.where(mask_bs, rewards_bs.astype(jnp.float32), 0.0)
    raise ValueError(f"refine_rewards: refinement={refinement!r} must be one of {REFINEMENTS}.")
