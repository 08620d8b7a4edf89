"""RRHF: rank the G sampled completions of each prompt by reward, with fine-tuning on the best.

See "RRHF: Rank Responses to Align Language Models with Human Feedback without tears"
(2304.05302). Each step samples G completions per prompt with the current policy, scores them
(verifier or reward model) and minimises `losses.rrhf`: a hinge that orders the completions'
length-normalised log-probs like their rewards, plus the negative log-likelihood of the best
completion. No reference model, no critic, no importance ratio; the policy's log-probs are at
temperature 1 (the model's own distribution, which the ranking is about).

The paper ranks the policy's samples together with the dataset's responses. With
`loss.reference_template` set (e.g. "The answer is {answer}."), the algorithm asks the run's
collector for `GoldReferences(template)`: each prompt's gold answer rendered by it joins its
group as one more candidate, scored by the same reward, so groups are G + 1 completions and a
group whose samples all fail still has a best one to fine-tune on.
"""

from __future__ import annotations

import types

import ml_collections
import numpy as np

from jaxrl_llm import losses
from jaxrl_llm.algorithms import registry
from jaxrl_llm.algorithms.base import ALWAYS_PRESENT, Algorithm, Experience, GoldReferences
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
    # Fine-tune on the "best" completion of a group whose rewards all tie (the paper's argmax
    # picks the first). On SmolLM2 / chain_sum that trained on wrong samples and collapsed the
    # policy to one-token answers (docs/preference.md), so off by default.
    c.ft_on_ties = False
    # Each prompt's gold answer rendered by this template joins its group ("" = samples only).
    c.reference_template = ""
    return {"loss": c}


def validate(config: ml_collections.ConfigDict) -> None:
    """RRHF's rules: non-negative weights and the shared preference-algorithm rules."""
    for field in ("rank_weight", "length_penalty"):
        if not config.loss[field] >= 0:
            raise ValueError(f"config.loss.{field}={config.loss[field]} must be >= 0.")
    template = config.loss.reference_template
    if template and "{answer}" not in template:
        raise ValueError(
            f"config.loss.reference_template={template!r} must contain '{{answer}}' (or be '')."
        )
    validate_preference_algorithm(config, "RRHF")


def with_references(experience: Experience):
    """(rows, rewards) of the groups with each prompt's reference appended: G + 1 rows a prompt,
    the samples first. Rows are a rollout-like namespace (tokens, completion_mask, logprobs)."""
    rollout, refs, g = experience.rollout, experience.references, experience.group_size
    p = refs.tokens.shape[0]

    def grouped(samples, extra):
        samples = np.asarray(samples).reshape(p, g, *np.shape(samples)[1:])
        return np.concatenate([samples, np.asarray(extra)[:, None]], axis=1).reshape(
            p * (g + 1), *samples.shape[2:]
        )

    rows = types.SimpleNamespace(
        tokens=grouped(rollout.tokens, refs.tokens),
        completion_mask=grouped(rollout.completion_mask, refs.completion_mask),
        logprobs=grouped(rollout.logprobs, np.zeros(refs.tokens.shape, np.float32)),
    )
    return rows, grouped(experience.rewards, refs.rewards)


def make(config: ml_collections.ConfigDict) -> Algorithm:
    """RRHF from a run config (roles: actor, rollout, reward)."""
    template = config.loss.reference_template
    group = config.rollout.group_size + (1 if template else 0)
    rank_weight, length_penalty = config.loss.rank_weight, config.loss.length_penalty
    ft_on_ties = config.loss.ft_on_ties
    remat = config.train.remat

    def make_batch(experience: Experience, state) -> tuple[PolicyBatch, dict[str, float]]:
        del state  # `advantages` carries each completion's reward: RRHF ranks by it
        if experience.references is None:
            return build_batch(experience.rollout, experience.rewards), {}
        rows, rewards = with_references(experience)
        batch = build_batch(rows, rewards)
        refs = experience.references.rewards
        return batch._replace(rollout_logp=batch.old_logp), {"reference_reward": float(refs.mean())}

    def loss(model, batch: PolicyBatch):
        logp_bt, _ = sequence_logprobs(model, batch.tokens, remat=remat)
        m, t = batch.tokens.shape
        return losses.rrhf(
            logp_bt.reshape(m // group, group, t),
            batch.loss_mask.reshape(m // group, group, t),
            batch.advantages.reshape(m // group, group),
            rank_weight=rank_weight,
            length_penalty=length_penalty,
            ft_on_ties=ft_on_ties,
        )

    return Algorithm(
        name="rrhf",
        make_batch=make_batch,
        loss=loss,
        roles=ALWAYS_PRESENT,
        collects=(GoldReferences(template),) if template else (),
    )


registry.register("rrhf", make=make, default_config=default_config, validate=validate)
