"""GRPO pieces: the loss on hand-made arrays, batches from a rollout layout, minibatches."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_llm.algorithms import (
    GRPOBatch,
    GRPOLossConfig,
    build_batch,
    group_advantages,
    grpo_loss,
    pack_batch,
    split_minibatches,
)
from jaxrl_llm.models import init_model, tiny_config
from jaxrl_llm.rollout.types import Rollout
from jaxrl_llm.training import sequence_logprobs


def _batch(model, kl=False):
    tokens = jnp.asarray([[1, 2, 3, 4, 5, 0], [7, 8, 9, 10, 0, 0]], jnp.int32)
    mask = jnp.asarray([[0, 0, 1, 1, 1, 0], [0, 0, 0, 1, 0, 0]], jnp.float32)
    logp, _ = sequence_logprobs(model, tokens)
    ref = logp - 0.1 * mask if kl else jnp.zeros_like(logp)
    return GRPOBatch(tokens, mask, logp * mask, ref * mask, jnp.asarray([1.5, -0.5], jnp.float32))


def test_on_policy_loss_is_minus_token_mean_advantage():
    model = init_model(tiny_config(), seed=0)
    batch = _batch(model)
    loss, metrics = grpo_loss(model, batch, config=GRPOLossConfig())
    # Ratio 1 everywhere: loss = -(3 tokens * 1.5 + 1 token * -0.5) / 4 tokens = -1.0
    np.testing.assert_allclose(float(loss), -1.0, atol=1e-6)
    assert float(metrics["clipfrac"]) == 0.0
    assert 0 < float(metrics["entropy"]) <= np.log(256) + 1e-4


def test_kl_term_adds_beta_times_k3():
    model = init_model(tiny_config(), seed=0)
    batch = _batch(model, kl=True)
    base, _ = grpo_loss(model, batch, config=GRPOLossConfig())
    loss, metrics = grpo_loss(model, batch, config=GRPOLossConfig(kl_beta=0.5))
    # ref - logp = -0.1 on every completion token: k3 = exp(-0.1) + 0.1 - 1 = 0.0048374
    k3 = np.exp(-0.1) + 0.1 - 1
    np.testing.assert_allclose(float(metrics["kl_ref"]), k3, rtol=1e-4)
    np.testing.assert_allclose(float(loss - base), 0.5 * k3, rtol=1e-4)


def test_gradient_on_policy_equals_reinforce_gradient():
    model = init_model(tiny_config(), seed=0)
    batch = _batch(model)
    from flax import nnx

    graphdef, params = nnx.split(model)

    def grpo(p):
        return grpo_loss(nnx.merge(graphdef, p), batch, config=GRPOLossConfig())[0]

    def reinforce(p):
        logp, _ = sequence_logprobs(nnx.merge(graphdef, p), batch.tokens)
        return -jnp.sum(logp * batch.loss_mask * batch.advantages[:, None]) / jnp.sum(
            batch.loss_mask
        )

    g1, g2 = jax.grad(grpo)(params), jax.grad(reinforce)(params)
    jax.tree.map(
        lambda a, b: np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-6), g1, g2
    )


def test_group_advantages_and_errors():
    adv = group_advantages(np.array([1.0, 0.0, 0.0, 0.0, 1.0, 1.0]), 3)
    # Group [1, 0, 0]: mean 1/3, unbiased std sqrt(1/3) = 0.57735 -> (2/3)/0.57735 = 1.1547
    np.testing.assert_allclose(adv[:3], [1.1547005, -0.5773503, -0.5773503], rtol=1e-5)
    np.testing.assert_allclose(
        group_advantages(np.array([1.0, 0.0, 1.0, 1.0]), 2, estimator="rloo"), [1.0, -1.0, 0.0, 0.0]
    )
    with pytest.raises(ValueError, match="not a multiple"):
        group_advantages(np.zeros(5), 2)
    with pytest.raises(ValueError, match="estimator='ppo'"):
        group_advantages(np.zeros(4), 2, estimator="ppo")


def test_build_batch_keeps_rollout_width_and_split_minibatches():
    b, t = 4, 100
    tokens = np.arange(b * t, dtype=np.int32).reshape(b, t)
    mask = np.zeros((b, t), bool)
    mask[:, 10:20] = True
    rollout = Rollout(
        tokens,
        mask,
        np.where(mask, -1.0, 0.0).astype(np.float32),
        np.zeros((b, t), np.float32),
        np.full(b, 10, np.int32),
        np.array([10, 3, 40, 5], np.int32),
        np.zeros(b, np.int32),
    )
    batch = build_batch(rollout, np.array([1, 2, 3, 4], np.float32))
    assert batch.tokens.shape == (4, 100) == batch.old_logp.shape  # one shape: one compile
    assert float(batch.old_logp.sum()) == -40.0  # 4 rows x 10 completion tokens x -1
    np.testing.assert_array_equal(np.asarray(batch.loss_mask.sum(1)), [10, 10, 10, 10])
    parts = split_minibatches(batch, 2)
    np.testing.assert_array_equal(np.asarray(parts[1].advantages), [3, 4])
    with pytest.raises(ValueError, match="num_minibatches=3"):
        split_minibatches(batch, 3)


def test_packed_batch_gives_the_unpacked_loss_and_gradient():
    from flax import nnx

    model = init_model(tiny_config(tie_word_embeddings=False), seed=0)
    rng = np.random.default_rng(0)
    prompt_len, comp_len = np.array([3, 2, 4, 2]), np.array([2, 3, 1, 4])
    width = 11  # lengths 5, 5, 5, 6 pack into 2 rows
    tokens = np.zeros((4, width), np.int32)
    mask = np.zeros((4, width), np.float32)
    for b, (p, c) in enumerate(zip(prompt_len, comp_len, strict=True)):
        tokens[b, : p + c] = rng.integers(1, 256, p + c)
        mask[b, p : p + c] = 1
    logp, _ = sequence_logprobs(model, jnp.asarray(tokens))
    old = (np.asarray(logp) - 0.05 * rng.standard_normal((4, width))) * mask  # ratios != 1
    ref = (np.asarray(logp) - 0.1) * mask
    adv = np.array([1.0, -0.5, 0.25, -1.5], np.float32)
    batch = GRPOBatch(*(jnp.asarray(x) for x in (tokens, mask, old, ref, adv)))
    packed, plan = pack_batch(batch, prompt_len + comp_len, row_multiple=1)
    assert packed.tokens.shape == (2, width) and plan.num_rows == 2
    assert packed.advantages.shape == (2, width)
    config = GRPOLossConfig(kl_beta=0.05, clip_low=0.02, clip_high=0.02)

    def loss_and_grad(b):
        def f(m):
            return grpo_loss(m, b, config=config)

        (loss, metrics), grads = nnx.value_and_grad(f, has_aux=True)(model)
        return float(loss), metrics, grads

    loss_u, metrics_u, grads_u = loss_and_grad(batch)
    loss_p, metrics_p, grads_p = loss_and_grad(packed)
    assert float(metrics_u["clipfrac"]) > 0  # the clip is exercised
    np.testing.assert_allclose(loss_p, loss_u, rtol=1e-5, atol=1e-6)
    for k in ("kl_ref", "entropy", "clipfrac"):
        np.testing.assert_allclose(float(metrics_p[k]), float(metrics_u[k]), rtol=1e-5, atol=1e-6)
    for gu, gp in zip(jax.tree.leaves(grads_u), jax.tree.leaves(grads_p), strict=True):
        np.testing.assert_allclose(np.asarray(gp), np.asarray(gu), rtol=1e-4, atol=1e-6)
    with pytest.raises(ValueError, match="token-mean"):
        grpo_loss(model, packed, config=GRPOLossConfig(agg="seq-mean-token-mean"))
    with pytest.raises(ValueError, match="already packed"):
        pack_batch(packed, prompt_len + comp_len)
