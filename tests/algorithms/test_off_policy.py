"""The off-policy corrections behind `config.off_policy`, on hand-made log-probs."""

import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_llm import losses
from jaxrl_llm.algorithms.batch import PolicyBatch
from jaxrl_llm.algorithms.off_policy import (
    OffPolicyConfig,
    behaviour_diagnostics,
    corrected_pg_loss,
    validate_off_policy_section,
)
from jaxrl_llm.config import config_for

MASK = jnp.array([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
ADV = jnp.array([1.0, -2.0])
# current / proximal / behaviour log-probs of the sampled tokens
LOGP = jnp.log(jnp.array([[0.5, 0.4, 0.3], [0.2, 0.6, 0.9]]))
PROX = jnp.log(jnp.array([[0.45, 0.4, 0.35], [0.25, 0.5, 0.9]]))
BEHAV = jnp.log(jnp.array([[0.15, 0.4, 0.5], [0.25, 0.2, 0.1]]))


def _batch(old, rollout=BEHAV):
    zeros = jnp.zeros_like(LOGP)
    return PolicyBatch(zeros, MASK, old, zeros, ADV, rollout_logp=rollout)


def _loss(correction, old=PROX, **kw):
    off = OffPolicyConfig(correction=correction, **kw)
    return corrected_pg_loss(
        LOGP,
        _batch(old),
        off_policy=off,
        clip_low=0.2,
        clip_high=0.2,
        agg="token-mean",
        norm_len=None,
    )


def test_none_is_ppo_against_the_behaviour_policy():
    loss, _ = _loss("none", old=BEHAV)
    want, _ = losses.ppo_clip(LOGP, BEHAV, ADV, MASK)
    np.testing.assert_allclose(loss, want, rtol=1e-6)


def test_decoupled_ppo_weights_the_proximal_clip_by_prox_over_behaviour_uncapped():
    loss, metrics = _loss("decoupled_ppo", high=1.5)  # `high` does not cap decoupled PPO
    w = np.exp(np.asarray(PROX - BEHAV)) * np.asarray(MASK)
    assert w.max() > 1.5
    r = np.exp(np.asarray(LOGP - PROX))
    adv = np.asarray(ADV)[:, None]
    per_token = np.maximum(-adv * r, -adv * np.clip(r, 0.8, 1.2)) * w
    np.testing.assert_allclose(loss, per_token.sum() / 5, rtol=1e-5)
    assert float(metrics["off_policy/is_clipped_frac"]) == 0.0


def test_tis_truncates_and_icepop_masks_the_same_weights():
    _, tis = _loss("tis", high=1.5)
    _, icepop = _loss("icepop", low=0.5, high=1.5)
    rho = np.exp(np.asarray(PROX - BEHAV))[np.asarray(MASK) > 0]
    np.testing.assert_allclose(tis["off_policy/is_weight_mean"], np.minimum(rho, 1.5).mean(), 1e-5)
    kept = np.where((rho >= 0.5) & (rho <= 1.5), rho, 0.0)
    np.testing.assert_allclose(icepop["off_policy/is_weight_mean"], kept.mean(), rtol=1e-5)
    np.testing.assert_allclose(icepop["off_policy/is_clipped_frac"], np.mean(kept == 0), 1e-6)


def test_aipo_is_llamarls_capped_weight_against_the_behaviour_policy():
    loss, _ = _loss("aipo", high=2.0)
    want, _ = losses.aipo(LOGP, BEHAV, ADV, MASK, rho=2.0)
    np.testing.assert_allclose(loss, want, rtol=1e-6)


def test_diagnostics_effective_sample_size_and_behaviour_kl():
    same = behaviour_diagnostics(LOGP, LOGP, MASK)
    np.testing.assert_allclose(same["ess"], 1.0, rtol=1e-6)
    np.testing.assert_allclose(same["kl_behaviour"], 0.0, atol=1e-7)
    d = behaviour_diagnostics(LOGP, BEHAV, MASK)
    r = np.exp(np.asarray(LOGP - BEHAV))[np.asarray(MASK) > 0]
    np.testing.assert_allclose(d["ess"], r.sum() ** 2 / (5 * (r**2).sum()), rtol=1e-5)
    np.testing.assert_allclose(d["kl_behaviour"], np.mean(r - 1 - np.log(r)), rtol=1e-5)


def test_corrections_need_the_behaviour_log_probs():
    batch = _batch(PROX, rollout=None)
    with pytest.raises(ValueError, match="needs the behaviour log-probs"):
        corrected_pg_loss(
            LOGP,
            batch,
            off_policy=OffPolicyConfig("tis"),
            clip_low=0.2,
            clip_high=0.2,
            agg="token-mean",
            norm_len=None,
        )


@pytest.mark.parametrize(
    "field,value,match",
    [
        ("correction", "vtrace", r"config.off_policy.correction='vtrace' must be one of"),
        ("level", "row", r"config.off_policy.level='row'"),
        ("high", 0.0, r"config.off_policy.low=0.0 and high=0.0"),
    ],
)
def test_config_errors_name_the_field(field, value, match):
    config = config_for("grpo")
    with config.unlocked():
        config.off_policy[field] = value
    with pytest.raises(ValueError, match=match):
        validate_off_policy_section(config)
