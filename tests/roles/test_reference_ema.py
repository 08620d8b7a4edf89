"""A reference that follows the policy as an exponential moving average (Xu et al., 2404.10719):
after each actor update of a step, ref <- d * ref + (1 - d) * policy, worked by hand over two
updates through the runner's update; none while the actor is frozen; checkpointed with the run;
kept in the stored (master) dtype under mixed precision."""

import types

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from jaxrl_llm.algorithms import PolicyBatch
from jaxrl_llm.algorithms.policy_loss import PolicyLossConfig, policy_loss
from jaxrl_llm.config import config_for, make_tiny
from jaxrl_llm.models import init_model, tiny_config
from jaxrl_llm.roles import Learner, Reference
from jaxrl_llm.runners.online_run import OnlineRun, state_tree
from jaxrl_llm.sharding import make_mesh

DECAY = 0.75


def _batch() -> PolicyBatch:
    rng = np.random.default_rng(0)
    mask = np.zeros((4, 8), np.float32)
    mask[:, 2:6] = 1.0
    return PolicyBatch(
        tokens=jnp.asarray(rng.integers(1, 256, (4, 8)), jnp.int32),
        loss_mask=jnp.asarray(mask),
        old_logp=jnp.asarray(-5.5 * mask),
        ref_logp=jnp.asarray(-5.5 * mask),
        advantages=jnp.asarray([1.0, -1.0, 0.5, -0.5]),
    )


def _weights(state) -> dict:
    return {path: np.array(leaf.get_value()) for path, leaf in nnx.to_flat_state(state)}


def _run():
    """What `OnlineRun.update` reads of a run: a tiny actor and a reference that follows it."""
    mesh = make_mesh((2, 4), ("data", "model"), devices=jax.devices()[:8])
    policy = init_model(tiny_config(), seed=0)
    reference = Reference(policy, mesh, temperature=1.0, ema_decay=DECAY)  # copies first
    loss_config = PolicyLossConfig(remat="none")
    actor = Learner(
        policy, optax.sgd(0.5), lambda m, b: policy_loss(m, b, config=loss_config), mesh
    )
    config = make_tiny(config_for("ppo"))
    config.train.num_minibatches = 1  # one actor update (and one average step) a call
    roles = types.SimpleNamespace(actor=actor, critic=None, reference=reference)
    algorithm = types.SimpleNamespace(actor_frozen_steps=1)
    return types.SimpleNamespace(roles=roles, config=config, algorithm=algorithm)


def test_reference_is_the_hand_worked_moving_average_after_two_updates():
    run = _run()
    batch = _batch()
    p0 = _weights(run.roles.actor.params)
    ref_logp0 = run.roles.reference.logprobs(batch.tokens)
    OnlineRun.update(run, batch, 0)  # step 0 < actor_frozen_steps: the critic's alone
    assert _weights(run.roles.actor.params).keys() == p0.keys()
    for path, value in _weights(run.roles.reference.params).items():
        np.testing.assert_array_equal(value, p0[path])  # no actor update, no average step
    OnlineRun.update(run, batch, 1)
    p1 = _weights(run.roles.actor.params)
    OnlineRun.update(run, batch, 2)
    p2 = _weights(run.roles.actor.params)
    # r1 = d p0 + (1 - d) p1; r2 = d r1 + (1 - d) p2 = d^2 p0 + d (1 - d) p1 + (1 - d) p2
    d = DECAY
    moved = 0.0
    for path, got in _weights(run.roles.reference.params).items():
        want = d * d * p0[path] + d * (1 - d) * p1[path] + (1 - d) * p2[path]
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7, err_msg=str(path))
        moved = max(moved, float(np.abs(got - p0[path]).max()))
    assert moved > 1e-3  # the updates moved the policy, and the reference with it
    # the reference's forward reads the moved weights
    assert np.abs(run.roles.reference.logprobs(batch.tokens) - ref_logp0).max() > 1e-4
    assert "reference" in state_tree(run.roles, ())  # checkpointed with the run


def test_a_frozen_reference_refuses_to_move_and_keeps_the_compute_dtype():
    mesh = make_mesh((2, 4), ("data", "model"), devices=jax.devices()[:8])
    mixed = init_model(tiny_config(dtype="bfloat16", param_dtype="float32"), seed=0)
    frozen = Reference(mixed, mesh, temperature=1.0)
    with pytest.raises(ValueError, match="this reference is frozen"):
        frozen.ema_update(frozen.params)
    moving = Reference(mixed, mesh, temperature=1.0, ema_decay=0.9)
    dtypes = lambda ref: {leaf.get_value().dtype for _, leaf in nnx.to_flat_state(ref.params)}
    assert dtypes(frozen) == {jnp.dtype(jnp.bfloat16)}  # the compute dtype: no master copy
    assert dtypes(moving) == {jnp.dtype(jnp.float32)}  # small average steps are kept
