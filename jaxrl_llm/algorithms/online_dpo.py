"""Online DPO: each step samples G completions per prompt with the current policy, ranks them by
the reward (verifier or reward model), and trains the DPO loss on the best / worst pair.

See "Direct Language Model Alignment from Online AI Feedback" (2402.04792) for online DPO and
"Asynchronous RLHF: Faster and More Efficient Off-Policy RL for Language Models"
(2410.18252), which found it the most robust to off-policy samples: run it with
`config.async_rl.enabled=True` and `max_staleness=N` (deterministic mode) to train on samples
from exactly N steps ago. For prompt p with rewards r_p1..r_pG,

    chosen   = argmax_i r_pi,   rejected = argmin_i r_pi   (first index on ties)
    weight_p = 1 if r_p,chosen > r_p,rejected else 0       (a tied group gives no preference)
    loss     = DPO(chosen, rejected; reference = the initial policy) averaged with weight_p

Any loss type of `jaxrl_llm.training.preference` works (`config.loss.loss_type`): IPO, hinge,
KTO, or the reference-free SimPO and ORPO (which skip the reference forward).
"""

from __future__ import annotations

import jax.numpy as jnp
import ml_collections
import numpy as np

from jaxrl_llm.algorithms import registry
from jaxrl_llm.algorithms.base import ALWAYS_PRESENT, Algorithm, Experience
from jaxrl_llm.algorithms.batch import PolicyBatch
from jaxrl_llm.training.preference import (
    PairRows,
    PreferenceLossConfig,
    preference_loss,
    preference_section,
    validate_preference_section,
)


def best_worst_rows(rewards_b: np.ndarray, group_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Row indices [2P] (best then worst completion of each of P groups, interleaved) and pair
    weights [P] (1 where the best reward beats the worst, else 0) of rewards [P * G].

    Example:
      >>> best_worst_rows(np.array([0.0, 1.0, 1.0, 1.0]), 2)
      (array([1, 0, 2, 3]), array([1., 0.], dtype=float32))
    """
    rewards_pg = np.asarray(rewards_b, np.float32).reshape(-1, group_size)
    best, worst = rewards_pg.argmax(axis=1), rewards_pg.argmin(axis=1)
    tied = best == worst  # every completion has the same reward: take two distinct rows
    best, worst = np.where(tied, 0, best), np.where(tied, 1, worst)
    offsets = np.arange(rewards_pg.shape[0]) * group_size
    rows = np.stack([offsets + best, offsets + worst], axis=1).reshape(-1)
    gap = rewards_pg.max(axis=1) - rewards_pg.min(axis=1)
    return rows, (gap > 0).astype(np.float32)


def default_config() -> dict[str, ml_collections.ConfigDict]:
    """Online DPO's config section: `loss` (`training.preference.preference_section`)."""
    return {"loss": preference_section()}


def validate_preference_algorithm(config: ml_collections.ConfigDict, name: str) -> None:
    """The rules the preference algorithms share (online DPO, RRHF): groups of at least 2,
    whole groups per minibatch, no packing, no off-policy ratio correction."""
    if config.rollout.group_size < 2:
        raise ValueError(
            f"config.rollout.group_size must be >= 2: {name} compares completions of a prompt."
        )
    if config.rollout.num_prompts % config.train.num_minibatches:
        raise ValueError(
            f"config.train.num_minibatches={config.train.num_minibatches} must divide "
            f"config.rollout.num_prompts={config.rollout.num_prompts}: {name} keeps a prompt's "
            "completions in one minibatch."
        )
    if config.train.pack_sequences:
        raise ValueError(
            f"config.train.pack_sequences=True is not supported by {name} (its loss reads each "
            "row as one completion): set it to False."
        )
    if config.off_policy.correction != "none":
        raise ValueError(
            f"config.off_policy.correction={config.off_policy.correction!r}: {name} has no "
            "importance ratio to correct; set config.off_policy.correction='none'."
        )


def validate(config: ml_collections.ConfigDict) -> None:
    """Online DPO's rules: a valid loss section and the shared preference-algorithm rules."""
    validate_preference_section(config.loss, "loss")
    validate_preference_algorithm(config, "online DPO")


def make(config: ml_collections.ConfigDict) -> Algorithm:
    """Online DPO from a run config; a "reference" role unless the loss is reference-free."""
    loss_config = PreferenceLossConfig.from_section(
        config.loss, temperature=config.rollout.temperature, remat=config.train.remat
    )

    def make_batch(experience: Experience, state) -> tuple[PolicyBatch, dict[str, float]]:
        del state
        rollout = experience.rollout
        rows, weights_p = best_worst_rows(experience.rewards, experience.group_size)
        ref = experience.ref_logp
        ref = np.zeros(rollout.logprobs.shape, np.float32) if ref is None else ref
        logp = jnp.asarray(np.asarray(rollout.logprobs)[rows], jnp.float32)
        batch = PolicyBatch(
            tokens=jnp.asarray(np.asarray(rollout.tokens)[rows], jnp.int32),
            loss_mask=jnp.asarray(np.asarray(rollout.completion_mask)[rows], jnp.float32),
            old_logp=logp,
            ref_logp=jnp.asarray(np.asarray(ref)[rows], jnp.float32),
            advantages=jnp.asarray(np.repeat(weights_p, 2)),  # each row carries its pair weight
            rollout_logp=logp,
        )
        return batch, {"pairs_kept": float(weights_p.mean())}

    def loss(model, batch: PolicyBatch):
        rows = PairRows(
            tokens=batch.tokens,
            loss_mask=batch.loss_mask,
            ref_logp=(batch.ref_logp * batch.loss_mask).sum(-1),
            weights=batch.advantages[0::2],
        )
        return preference_loss(model, rows, config=loss_config)

    roles = ALWAYS_PRESENT + (("reference",) if loss_config.needs_reference else ())
    return Algorithm(name="online_dpo", make_batch=make_batch, loss=loss, roles=roles)


registry.register("online_dpo", make=make, default_config=default_config, validate=validate)
