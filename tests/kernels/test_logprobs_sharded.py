"""Vocabulary-parallel log-probs (kernels/logprobs/sharded.py) on fake CPU devices: values and
gradients of every backend against the full-vocabulary reference, the log-sum-exp's own
cotangent, and targets outside the vocabulary."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_llm.sharding import make_mesh
from kernels.logprobs import (
    pallas_tpu,
    token_logprobs_reference,
    token_logprobs_sharded,
    token_stats,
)


def _inputs(b=4, t=8, d=16, v=256):
    keys = jax.random.split(jax.random.key(0), 3)
    h = jax.random.normal(keys[0], (b, t, d))
    w = jax.random.normal(keys[1], (d, v)) * 0.5
    y = jax.random.randint(keys[2], (b, t), 0, v)
    return h, w, y.at[0, 0].set(-1).at[1, 1].set(v + 7)  # two targets outside [0, V)


def _loss(fn):
    def loss(h, w):
        logp, ent = fn(h, w)
        return (logp * jnp.arange(1, logp.shape[1] + 1)).sum() + 0.3 * ent.sum()

    return loss


# pallas_tpu's interpreter runs every device of a shard_map in lockstep; with 8 fake devices
# on 2 cores its backward never finishes, so it runs on a 1 x 2 mesh.
@pytest.mark.parametrize(
    "implementation, mesh_shape", [("xla", (2, 4)), ("naive", (2, 4)), ("pallas_tpu", (1, 2))]
)
def test_matches_the_full_vocabulary(implementation, mesh_shape):
    h, w, y = _inputs()
    mesh = make_mesh(mesh_shape, ("data", "model"), devices=jax.devices()[: np.prod(mesh_shape)])
    kw = dict(interpret=True, block_t=8, block_v=128) if implementation == "pallas_tpu" else {}
    before = dict(pallas_tpu.TRACE_COUNTS)

    def sharded(h, w):
        return token_logprobs_sharded(
            h, w, y, mesh=mesh, batch_axes=("data",) if mesh_shape[0] > 1 else (),
            vocab_axes=("model",), temperature=0.7, implementation=implementation, **kw,
        )  # fmt: skip

    def reference(h, w):
        return token_logprobs_reference(h, w, y, temperature=0.7)

    (got, got_grads) = jax.jit(jax.value_and_grad(_loss(sharded), argnums=(0, 1)))(h, w)
    (want, want_grads) = jax.value_and_grad(_loss(reference), argnums=(0, 1))(h, w)
    logp, ent = jax.jit(sharded)(h, w)
    ref_logp, ref_ent = reference(h, w)
    np.testing.assert_allclose(logp, ref_logp, atol=2e-5)
    np.testing.assert_allclose(ent, ref_ent, atol=2e-5)
    np.testing.assert_allclose(got, want, rtol=1e-5)
    for a, b in zip(got_grads, want_grads, strict=True):
        np.testing.assert_allclose(a, b, atol=5e-5)
    if implementation == "pallas_tpu":  # the kernel bodies really ran
        assert pallas_tpu.TRACE_COUNTS["tpu_fwd"] > before.get("tpu_fwd", 0)
        assert pallas_tpu.TRACE_COUNTS["tpu_bwd_w"] > before.get("tpu_bwd_w", 0)


@pytest.mark.parametrize("implementation", ["xla", "naive"])
def test_log_sum_exp_gradient(implementation):
    """`token_stats`' lse carries its own cotangent: d lse / d logits = softmax."""
    h, w, y = _inputs(b=2, t=3, d=8, v=64)

    def lse_of(h):
        return token_stats(h, w, y, temperature=0.5, implementation=implementation)[2].sum()

    def direct(h):
        logits = jnp.einsum("btd,dv->btv", h, w, precision="highest") / 0.5
        return jax.nn.logsumexp(logits, axis=-1).sum()

    np.testing.assert_allclose(jax.grad(lse_of)(h), jax.grad(direct)(h), atol=1e-5)
    np.testing.assert_allclose(lse_of(h), direct(h), rtol=1e-6)


def test_vocabulary_must_divide():
    h, w, y = _inputs(v=250)
    mesh = make_mesh((1, 4), ("data", "model"), devices=jax.devices()[:4])
    with pytest.raises(ValueError, match="V=250 over"):
        token_logprobs_sharded(h, w, y, mesh=mesh, vocab_axes=("model",))
