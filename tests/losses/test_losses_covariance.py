"""Clip-Cov on hand-made arrays: the covariance, the choice of tokens, the dropped gradient."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_llm import losses


def test_token_covariance_is_the_centred_product_over_loss_tokens():
    logp = jnp.log(jnp.array([[0.8, 0.4, 0.2, 0.9], [0.5, 0.1, 0.6, 0.3]]))
    adv = jnp.array([1.0, -1.0])  # per sequence, broadcast over tokens
    mask = jnp.array([[1, 1, 1, 0], [1, 1, 0, 0]], jnp.float32)
    cov = np.asarray(losses.token_covariance(logp, adv, mask))
    # by hand: means over the five loss tokens
    lp = np.log([0.8, 0.4, 0.2, 0.5, 0.1])
    a = np.array([1.0, 1.0, 1.0, -1.0, -1.0])
    expected = (lp - lp.mean()) * (a - a.mean())
    np.testing.assert_allclose(cov[mask > 0], expected, rtol=1e-6)
    assert (cov[mask == 0] == 0).all()
    # confident and rewarded, unlikely and punished: positive (the tokens that cut entropy)
    assert cov[0, 0] > 0 and cov[1, 1] > 0
    # per-token advantages give the same as their broadcast per-sequence form
    per_token = losses.token_covariance(logp, jnp.broadcast_to(adv[:, None], (2, 4)), mask)
    np.testing.assert_allclose(np.asarray(per_token), cov, rtol=1e-6)


def test_token_covariance_passes_no_gradient():
    logp = jnp.log(jnp.array([[0.8, 0.4, 0.2]]))
    grad = jax.grad(lambda x: losses.token_covariance(x, jnp.array([1.0]), jnp.ones((1, 3))).sum())
    assert not np.asarray(grad(logp)).any()


def test_clip_cov_chooses_n_eligible_tokens_with_the_most_noise():
    cov = jnp.array([[0.5, 2.0, 3.0, 6.0, 1.5, 4.0, -2.0, 2.5, 1.0, 0.0]])
    mask = jnp.array([[1, 1, 1, 1, 1, 1, 1, 1, 0, 1]], jnp.float32)
    noise = jnp.array([[0.9, 0.1, 0.7, 0.99, 0.3, 0.8, 0.95, 0.2, 0.97, 0.5]])
    chosen, metrics = losses.clip_cov_selection(cov, mask, noise, fraction=0.3, low=1.0, high=5.0)
    # nine loss tokens; eligible (1 <= cov <= 5, in the mask): 1, 2, 4, 5, 7 (token 8 has
    # cov 1.0 but no loss, token 3 is above the window); floor(0.3 * 9) = 2 chosen: the two
    # eligible ones with the most noise, 5 (0.8) and 2 (0.7)
    assert np.flatnonzero(np.asarray(chosen[0])).tolist() == [2, 5]
    assert float(metrics["eligible_fraction"]) == pytest.approx(5 / 9)
    assert float(metrics["dropped_fraction"]) == pytest.approx(2 / 9)


def test_clip_cov_drops_at_least_one_token_and_never_more_than_are_eligible():
    cov = jnp.array([[2.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 9.0]])
    mask = jnp.ones((2, 4))
    noise = jnp.full((2, 4), 0.5)
    chosen, _ = losses.clip_cov_selection(cov, mask, noise, fraction=0.01, low=1.0, high=5.0)
    assert np.asarray(chosen).sum() == 1 and bool(chosen[0, 0])  # floor(0.08) -> 1
    chosen, metrics = losses.clip_cov_selection(cov, mask, noise, fraction=0.9, low=3.0, high=5.0)
    assert not np.asarray(chosen).any()  # nothing in the window: nothing dropped
    assert float(metrics["dropped_fraction"]) == 0.0


def test_clip_cov_choice_is_uniform_over_the_eligible_tokens():
    cov = jnp.array([[2.0, 2.0, 2.0, 2.0, 0.0, 0.0, 0.0, 0.0]])
    mask = jnp.ones((1, 8))
    select = jax.jit(
        lambda noise: losses.clip_cov_selection(cov, mask, noise, fraction=0.25, low=1.0, high=5.0)[
            0
        ]
    )
    draws = 4000
    keys = jax.random.split(jax.random.key(0), draws)
    counts = np.zeros(8)
    for chosen in jax.vmap(select)(jax.vmap(lambda k: jax.random.uniform(k, (1, 8)))(keys)):
        counts += np.asarray(chosen[0])
    # two of the four eligible tokens each time: each is chosen with probability 1/2
    assert counts[4:].sum() == 0
    np.testing.assert_allclose(counts[:4] / draws, 0.5, atol=0.04)  # ~5 standard errors


def test_clip_cov_rejects_a_bad_fraction_or_window():
    x = jnp.ones((1, 2))
    with pytest.raises(ValueError, match="0 < fraction < 1"):
        losses.clip_cov_selection(x, x, x, fraction=0.0, low=1.0, high=5.0)
    with pytest.raises(ValueError, match="low < high"):
        losses.clip_cov_selection(x, x, x, fraction=0.1, low=5.0, high=1.0)


def _tiny_model():
    from jaxrl_llm.models import ModelConfig, init_model

    config = ModelConfig(
        vocab_size=32, hidden_size=16, intermediate_size=32, num_layers=1, num_heads=2,
        num_kv_heads=1,
    )  # fmt: skip
    return init_model(config, seed=0)


def test_policy_loss_takes_no_gradient_from_the_dropped_tokens():
    """Dropping tokens by Clip-Cov equals masking them out of the policy-gradient term (with
    the loss's normaliser unchanged): compared through the gradients of the same tiny model."""
    from flax import nnx

    from jaxrl_llm.algorithms.batch import PolicyBatch
    from jaxrl_llm.algorithms.policy_loss import PolicyLossConfig, policy_loss
    from jaxrl_llm.training.logprobs import sequence_logprobs

    model = _tiny_model()
    tokens = jax.random.randint(jax.random.key(1), (2, 6), 0, 32)
    mask = jnp.array([[0, 0, 1, 1, 1, 0], [0, 1, 1, 1, 1, 1]], jnp.float32)
    noise = jax.random.uniform(jax.random.key(2), (2, 6))
    logp, _ = sequence_logprobs(model, tokens)
    adv = jnp.array([1.5, -1.5])
    batch = PolicyBatch(
        tokens, mask, jax.lax.stop_gradient(logp), jnp.zeros((2, 6)), adv, token_noise=noise
    )
    cov = losses.token_covariance(logp, adv, mask)
    high = float(cov.max()) + 1.0
    config = PolicyLossConfig(clip_cov_fraction=0.25, clip_cov_low=-high, clip_cov_high=high)
    chosen, _ = losses.clip_cov_selection(cov, mask, noise, fraction=0.25, low=-high, high=high)
    assert int(np.asarray(chosen).sum()) == 2  # floor(0.25 * 8) of the eight loss tokens

    def grads(loss_fn):
        return nnx.grad(lambda m: loss_fn(m)[0])(model)

    with_clip_cov = grads(lambda m: policy_loss(m, batch, config=config))

    def masked_by_hand(m):
        # the same PG term with the chosen tokens' advantage zeroed: no gradient from them,
        # the token-mean's normaliser unchanged
        adv_bt = jnp.where(chosen, 0.0, jnp.broadcast_to(adv[:, None], (2, 6)))
        return policy_loss(m, batch._replace(advantages=adv_bt), config=PolicyLossConfig())

    by_hand = grads(masked_by_hand)
    plain = grads(lambda m: policy_loss(m, batch, config=PolicyLossConfig()))
    leaves = jax.tree.leaves(nnx.state(with_clip_cov))
    for got, want in zip(leaves, jax.tree.leaves(nnx.state(by_hand)), strict=True):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-7)
    assert any(
        not np.allclose(np.asarray(a), np.asarray(b), atol=1e-7)
        for a, b in zip(leaves, jax.tree.leaves(nnx.state(plain)), strict=True)
    )
    _, metrics = policy_loss(model, batch, config=config)
    assert float(metrics["clip_cov/dropped_fraction"]) == pytest.approx(2 / 8)
    # an adaptive share in the batch replaces the config's; packed rows pad it with 0
    share = jnp.array([[0.5, 0.5, 0.5, 0.5, 0.0, 0.0], [0.5, 0.5, 0.5, 0.0, 0.0, 0.0]])
    _, metrics = policy_loss(model, batch._replace(clip_cov_fraction=share), config=config)
    assert float(metrics["clip_cov/dropped_fraction"]) == pytest.approx(4 / 8)


def test_policy_loss_with_clip_cov_needs_the_noise():
    from jaxrl_llm.algorithms.batch import PolicyBatch
    from jaxrl_llm.algorithms.policy_loss import PolicyLossConfig, policy_loss

    tokens = jnp.zeros((1, 4), jnp.int32)
    batch = PolicyBatch(tokens, jnp.ones((1, 4)), jnp.zeros((1, 4)), jnp.zeros((1, 4)), jnp.ones(1))
    with pytest.raises(ValueError, match="token_noise"):
        policy_loss(_tiny_model(), batch, config=PolicyLossConfig(clip_cov_fraction=0.1))


def test_clip_cov_share_may_be_a_traced_scalar():
    """An adaptive share arrives as an array inside the jitted step: it chooses as the number
    does, and a larger share chooses more."""
    cov = jnp.array([[0.5, 2.0, 3.0, 6.0, 1.5, 4.0, -2.0, 2.5, 1.0, 0.0]])
    mask = jnp.array([[1, 1, 1, 1, 1, 1, 1, 1, 0, 1]], jnp.float32)
    noise = jnp.array([[0.9, 0.1, 0.7, 0.99, 0.3, 0.8, 0.95, 0.2, 0.97, 0.5]])

    @jax.jit
    def choose(fraction):
        return losses.clip_cov_selection(cov, mask, noise, fraction=fraction, low=1.0, high=5.0)[0]

    as_number, _ = losses.clip_cov_selection(cov, mask, noise, fraction=0.3, low=1.0, high=5.0)
    np.testing.assert_array_equal(np.asarray(choose(jnp.float32(0.3))), np.asarray(as_number))
    # floor(0.45 * 9) = 4 of the five eligible tokens: all but the one with the least noise (1)
    assert np.flatnonzero(np.asarray(choose(jnp.float32(0.45))[0])).tolist() == [2, 4, 5, 7]
