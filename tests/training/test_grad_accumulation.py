"""Gradient accumulation: one update over K micro-batches equals one update on the whole batch.

The micro-batches' weights are their shares of the loss's denominator (`micro_batch_weights`),
so the token-mean is over every token of the batch, not a mean of the micro-batches' means;
checked on a tiny model with the PPO-family policy loss under two aggregation modes, with
masks whose micro-batches hold unequal token and sequence counts, through the pure step and
through a `Learner` on a (2, 4) mesh of 8 CPU devices.
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from jaxrl_llm.algorithms import PolicyBatch, micro_batch_weights
from jaxrl_llm.algorithms.policy_loss import PolicyLossConfig, policy_loss
from jaxrl_llm.models import init_model, tiny_config
from jaxrl_llm.roles import Learner
from jaxrl_llm.sharding import make_mesh
from jaxrl_llm.training import create_train_state, make_train_step

T = 8


def _batch(lengths, seed=0) -> PolicyBatch:
    """Rows of T tokens whose loss mask covers `lengths[b]` tokens from column 2 on."""
    rng = np.random.default_rng(seed)
    rows = len(lengths)
    mask = np.zeros((rows, T), np.float32)
    for b, n in enumerate(lengths):
        mask[b, 2 : 2 + n] = 1.0
    old_logp = np.where(mask > 0, rng.uniform(-6.5, -4.5, (rows, T)), 0.0)
    return PolicyBatch(
        tokens=jnp.asarray(rng.integers(1, 256, (rows, T)), jnp.int32),
        loss_mask=jnp.asarray(mask),
        old_logp=jnp.asarray(old_logp, jnp.float32),
        ref_logp=jnp.asarray(old_logp - 0.1 * mask, jnp.float32),
        advantages=jnp.asarray(rng.normal(size=rows), jnp.float32),
    )


def _loss(agg: str):
    # the KL and entropy terms too: every term must take the whole batch's normaliser
    config = PolicyLossConfig(kl_beta=0.1, entropy_coef=0.01, agg=agg, remat="none")
    return lambda model, batch: policy_loss(model, batch, config=config)


# Micro-batch 0: rows with 5 and 1 loss tokens; micro-batch 1: 2 and 0 (an empty row).
LENGTHS = (5, 1, 2, 0)


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean"])
def test_accumulated_update_equals_the_whole_batch_update(agg):
    batch = _batch(LENGTHS)
    got_weights = micro_batch_weights(batch, 2, agg=agg)
    # SGD: the update is the gradient itself, so any error in it shows in the parameters
    optimizer = optax.sgd(1.0)
    graphdef, state = create_train_state(init_model(tiny_config(), seed=0), optimizer)
    loss_fn = _loss(agg)
    whole = make_train_step(graphdef, optimizer, loss_fn, donate=False)
    accumulating = make_train_step(graphdef, optimizer, loss_fn, donate=False, accumulate=True)
    whole_state, whole_metrics = whole(state, batch)
    acc_state, acc_metrics = accumulating(state, batch, jnp.asarray(got_weights))
    for key in ("loss", "pg_loss", "grad_norm"):
        np.testing.assert_allclose(acc_metrics[key], whole_metrics[key], rtol=1e-5, err_msg=key)
    assert float(whole_metrics["grad_norm"]) > 1e-3  # the update moved the weights
    pairs = zip(jax.tree.leaves(acc_state.params), jax.tree.leaves(whole_state.params), strict=True)
    for got, want in pairs:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert int(acc_state.step) == 1
    if agg == "token-mean":  # a mean of the micro-batches' means is another update
        _, mean_of_means = accumulating(state, batch, jnp.asarray([0.5, 0.5]))
        assert abs(float(mean_of_means["loss"]) - float(whole_metrics["loss"])) > 1e-4
        assert abs(float(mean_of_means["grad_norm"]) - float(whole_metrics["grad_norm"])) > 1e-4


def test_micro_batch_weights_are_shares_of_the_loss_denominator():
    batch = _batch(LENGTHS)
    tokens, sequences = [6 / 8, 2 / 8], [2 / 3, 1 / 3]  # the empty row counts for neither
    np.testing.assert_allclose(micro_batch_weights(batch, 2, agg="token-mean"), tokens)
    for agg in ("seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"):
        np.testing.assert_allclose(micro_batch_weights(batch, 2, agg=agg), sequences, rtol=1e-6)
    np.testing.assert_array_equal(  # nothing to count: equal weights (the loss is 0 anyway)
        micro_batch_weights(_batch((0, 0, 0, 0)), 2, agg="token-mean"), [0.5, 0.5]
    )
    with pytest.raises(ValueError, match="num_minibatches=3 must divide the 4 sequences"):
        micro_batch_weights(batch, 3, agg="token-mean")


def test_learner_accumulates_on_a_mesh_as_it_updates_on_the_whole_batch():
    mesh = make_mesh((2, 4), ("data", "model"), devices=jax.devices()[:8])
    batch = _batch((5, 1, 3, 2, 2, 0, 4, 1), seed=1)
    weights = micro_batch_weights(batch, 4, agg="token-mean")  # 2 rows a micro-batch
    np.testing.assert_allclose(weights, [6 / 18, 5 / 18, 2 / 18, 5 / 18], rtol=1e-6)

    def learner():  # each its own weights: a learner's step donates them
        model = init_model(tiny_config(), seed=0)
        return Learner(model, optax.adamw(1e-3), _loss("token-mean"), mesh)

    whole, accumulating = learner(), learner()
    for _ in range(2):  # the second update goes through Adam's moments too
        whole_metrics = whole.update(batch)
        acc_metrics = accumulating.update(batch, micro_weights=weights)
    np.testing.assert_allclose(acc_metrics["loss"], whole_metrics["loss"], rtol=1e-5)
    np.testing.assert_allclose(acc_metrics["grad_norm"], whole_metrics["grad_norm"], rtol=1e-5)
    assert float(acc_metrics["learning_step"]) == 2.0
    got = nnx.to_flat_state(accumulating.params)
    want = dict(nnx.to_flat_state(whole.params))
    for path, leaf in got:
        np.testing.assert_allclose(
            np.asarray(leaf.get_value()), np.asarray(want[path].get_value()), atol=2e-6
        )
        assert leaf.get_value().sharding == want[path].get_value().sharding  # same layout
