"""Log-probs through the fused kernel, the optimizer factory and the jitted, donated train step."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from jaxrl_llm.models import init_model, tiny_config
from jaxrl_llm.training import (
    create_train_state,
    learning_rate_schedule,
    make_optimizer,
    make_train_step,
    sequence_logprobs,
)


def test_sequence_logprobs_match_full_logits():
    model = init_model(tiny_config(), seed=0)
    tokens = jax.random.randint(jax.random.PRNGKey(1), (3, 7), 0, 256)
    logp, entropy = sequence_logprobs(model, tokens, temperature=0.7, return_entropy=True)
    log_softmax = jax.nn.log_softmax(model(tokens).astype(jnp.float32) / 0.7, axis=-1)
    expected = jnp.take_along_axis(log_softmax[:, :-1], tokens[:, 1:, None], -1)[..., 0]
    np.testing.assert_allclose(np.asarray(logp[:, 1:]), np.asarray(expected), atol=1e-5)
    assert np.all(np.asarray(logp[:, 0]) == 0)
    expected_entropy = -jnp.sum(jnp.exp(log_softmax) * log_softmax, -1)[:, :-1]
    np.testing.assert_allclose(np.asarray(entropy[:, 1:]), np.asarray(expected_entropy), atol=1e-5)


def test_warmup_then_constant_and_cosine():
    lr = learning_rate_schedule(learning_rate=1.0, warmup_steps=4)
    assert [float(lr(i)) for i in (0, 2, 4, 100)] == [0.0, 0.5, 1.0, 1.0]
    cos = learning_rate_schedule(
        learning_rate=1.0, warmup_steps=2, total_steps=6, schedule="cosine"
    )
    np.testing.assert_allclose(float(cos(4)), 0.5, atol=1e-6)  # halfway through 4 decay steps
    with pytest.raises(ValueError, match="schedule='bogus'"):
        learning_rate_schedule(learning_rate=1.0, schedule="bogus")
    with pytest.raises(ValueError, match="needs total_steps"):
        make_optimizer(learning_rate=1.0, schedule="cosine")
    with pytest.raises(ValueError) as info:
        make_optimizer(
            learning_rate=1.0,
            warmup_steps=2,
            total_steps=1,
            schedule="cosine",
            field="config.optimizer",
        )
    assert str(info.value) == (
        "config.optimizer.schedule='cosine' decays over the run's 1 optimizer updates, which "
        "must outnumber config.optimizer.warmup_steps=2: set --config.optimizer.warmup_steps "
        "below 1, raise --config.train.num_steps, or set --config.optimizer.schedule=constant."
    )


def _xent_loss(model, batch):
    logp, _ = sequence_logprobs(model, batch["tokens"])
    loss = -jnp.mean(logp[:, 1:] * batch["scale"])
    return loss, {"mean_logp": jnp.mean(logp[:, 1:])}


def test_train_step_learns_skips_nonfinite_and_does_not_retrace():
    model = init_model(tiny_config(), seed=0)
    optimizer = make_optimizer(learning_rate=1e-2, max_grad_norm=1.0)
    graphdef, state = create_train_state(model, optimizer)
    traces = []

    def loss_fn(m, b):
        traces.append(1)
        return _xent_loss(m, b)

    step = make_train_step(graphdef, optimizer, loss_fn)
    batch = {
        "tokens": jnp.tile(jnp.arange(8, dtype=jnp.int32)[None], (2, 1)),
        "scale": jnp.float32(1.0),
    }
    losses = []
    for _ in range(5):
        old_leaf = jax.tree.leaves(state.params)[0]
        state, metrics = step(state, batch)
        losses.append(float(metrics["loss"]))
        assert old_leaf.is_deleted()  # the incoming state was donated
    assert losses[-1] < losses[0] - 0.1
    assert int(state.step) == 5 and len(traces) == 1

    before = jax.tree.map(np.asarray, state.params)
    state, metrics = step(state, {**batch, "scale": jnp.float32(jnp.nan)})
    assert float(metrics["nonfinite"]) == 1.0 and int(state.step) == 5
    jax.tree.map(np.testing.assert_array_equal, before, jax.tree.map(np.asarray, state.params))
    assert len(traces) == 1


def test_finite_loss_with_nonfinite_gradient_is_skipped():
    """0 * sqrt(|w|) at w = 0: the loss is 0, one gradient element is 0 * inf = NaN."""
    model = init_model(tiny_config(), seed=0)
    optimizer = make_optimizer(learning_rate=1e-2)
    graphdef, state = create_train_state(model, optimizer)

    def loss_fn(m, b):
        logp, _ = sequence_logprobs(m, b["tokens"])
        scale = m.final_norm.scale[...]
        kink = b["zero"] * jnp.sqrt(jnp.abs(scale[0] - scale[0]))
        return -jnp.mean(logp[:, 1:]) + kink, {}

    step = make_train_step(graphdef, optimizer, loss_fn, donate=False)
    batch = {"tokens": jnp.ones((2, 5), jnp.int32), "zero": jnp.float32(0.0)}
    new_state, metrics = step(state, batch)
    assert np.isfinite(float(metrics["loss"])) and not np.isfinite(float(metrics["grad_norm"]))
    assert float(metrics["nonfinite"]) == 1.0 and int(new_state.step) == 0
    jax.tree.map(np.testing.assert_array_equal, state.params, new_state.params)


def test_optimizer_state_matches_params_structure():
    model = init_model(tiny_config(), seed=0)
    optimizer = make_optimizer(learning_rate=1e-3)
    _, state = create_train_state(model, optimizer)
    adam = state.opt_state[1][0]
    assert isinstance(adam, optax.ScaleByAdamState)
    assert jax.tree.structure(adam.mu) == jax.tree.structure(state.params)
    assert isinstance(state.params, nnx.State)
