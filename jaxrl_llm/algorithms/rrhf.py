"""RRHF: rank the G sampled completions of each prompt by reward, with fine-tuning on the best.

See "RRHF: Rank Responses to Align Language Models with Human Feedback without tears"
(2304.05302). Each step samples G completions per prompt with the current policy, scores them
(verifier or reward model) and minimises `losses.rrhf`: a hinge that orders the completions'
length-normalised log-probs like their rewards, plus the negative log-likelihood of the best
completion. No reference, no critic, no importance ratio; the policy's log-probs are at
temperature 1 (the model's own distribution, which the ranking is about).
"""

from __future__ import annotations

import ml_collections

from jaxrl_llm import losses
from jaxrl_llm.algorithms import registry
from jaxrl_llm.algorithms.base import ALWAYS_PRESENT, Algorithm, Experience
from jaxrl_llm.algorithms.batch import PolicyBatch, build_batch
from jaxrl_llm.algorithms.online_dpo import validate_preference_algorithm
from jaxrl_llm.training.logprobs import sequence_logprobs


def default_config() -> dict[str, ml_collections.ConfigDict]:
    """RRHF's config section `loss`."""
    c = ml_collections.ConfigDict()
    # Weight of the ranking term (the official code's rrhf_weight).
    c.rank_weight = 1.0
    # Exponent of the length normalisation of each completion's log-prob score.
    c.length_penalty = 1.0
    return {"loss": c}


def validate(config: ml_collections.ConfigDict) -> None:
    """RRHF's rules: non-negative weights and the shared preference-algorithm rules."""
    for field in ("rank_weight", "length_penalty"):
        if not config.loss[field] >= 0:
            raise ValueError(f"config.loss.{field}={config.loss[field]} must be >= 0.")
    validate_preference_algorithm(config, "RRHF")


def make(config: ml_collections.ConfigDict) -> Algorithm:
    """RRHF from a run config (roles: actor, rollout, reward)."""
    group = config.rollout.group_size
    rank_weight, length_penalty = config.loss.rank_weight, config.loss.length_penalty
    remat = config.train.remat

    def make_batch(experience: Experience, state) -> tuple[PolicyBatch, dict[str, float]]:
        del state  # `advantages` carries each completion's reward: RRHF ranks by it
        return build_batch(experience.rollout, experience.rewards), {}

    def loss(model, batch: PolicyBatch):
        logp_bt, _ = sequence_logprobs(model, batch.tokens, remat=remat)
        m, t = batch.tokens.shape
        return losses.rrhf(
            logp_bt.reshape(m // group, group, t),
            batch.loss_mask.reshape(m // group, group, t),
            batch.advantages.reshape(m // group, group),
            rank_weight=rank_weight,
            length_penalty=length_penalty,
        )

    return Algorithm(name="rrhf", make_batch=make_batch, loss=loss, roles=ALWAYS_PRESENT)


registry.register("rrhf", make=make, default_config=default_config, validate=validate)
