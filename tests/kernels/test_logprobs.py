"""Tests of kernels/logprobs: the reference by hand, then every backend against the reference.

Pallas backends run in interpret mode on CPU (TPU interpret parameters for ``pallas_tpu``, the
generic interpreter for ``pallas_gpu``), and each such test asserts that the kernel body really
ran: its trace counter moved, the program contains a ``pallas_call``, and (TPU) the interpreter
visited exactly the expected grid points.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental.pallas import tpu as pltpu

import kernels.logprobs as lp
from kernels.logprobs import chunked, pallas_gpu, pallas_tpu
from kernels.logprobs.config import BlockConfig, default_config

# Tolerances by input dtype, relative: |got - want| <= tol * (|want| + max|want|) elementwise,
# i.e. rtol = tol plus an atol of tol times the array's largest magnitude (so entries near 0
# are judged on the array's scale, not their own).
# - float32: 1e-5 for everything (the bar); measured errors are below 4e-7.
# - bfloat16: the forward sees the same bf16 inputs as the float32 reference and accumulates in
#   float32, so it stays at 1e-5. The backward casts each dlogits tile to bfloat16 before its
#   two matmuls (as flash attention does for the MXU / tensor cores), a relative rounding of
#   2^-9 per element, and returns the gradients in bfloat16 (another 2^-9), so gradients get
#   1e-2 (measured: 2.7e-3 on every backend, i.e. the rounding of the bfloat16 result itself).
TOLERANCES = {
    jnp.float32: {"fwd": 1e-5, "grad": 1e-5},
    jnp.bfloat16: {"fwd": 1e-5, "grad": 1e-2},
}

INTERPRET = {"xla": False, "pallas_tpu": True, "pallas_gpu": True}


def assert_close(got, want, tol, what):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape, what
    assert np.all(np.isfinite(got)), f"{what}: non-finite values"
    scale = np.max(np.abs(want))
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * scale, err_msg=what)


def make_inputs(b, t, d, v, *, dtype=jnp.float32, seed=0, masked=True, scale=1.0):
    """Random inputs; with ``masked`` a quarter of the tokens are padding (target -1, hidden 0)."""
    k = jax.random.split(jax.random.key(seed), 5)
    hidden = scale * jax.random.normal(k[0], (b, t, d), jnp.float32)
    unembed = jax.random.normal(k[1], (d, v), jnp.float32) / math.sqrt(d) * 3.0
    targets = jax.random.randint(k[2], (b, t), 0, v, jnp.int32)
    mask = jax.random.uniform(k[3], (b, t)) > 0.25 if masked else jnp.ones((b, t), bool)
    targets = jnp.where(mask, targets, -1)
    hidden = jnp.where(mask[..., None], hidden, 0.0)
    return hidden.astype(dtype), unembed.astype(dtype), targets, mask, k[4]


def value_and_grads(fn, hidden, unembed, targets, mask, key):
    """(logp, entropy, d/dhidden, d/dunembed) of a masked RL-like loss with an entropy bonus."""
    g_logp, g_ent = jax.random.normal(key, (2,) + targets.shape)

    def loss(h, w):
        logp, ent = fn(h, w, targets)
        return jnp.sum(mask * (g_logp * logp + 0.1 * g_ent * ent)), (logp, ent)

    (_, (logp, ent)), (dh, dw) = jax.jit(jax.value_and_grad(loss, argnums=(0, 1), has_aux=True))(
        hidden, unembed
    )
    return logp, ent, dh, dw


def reference_fn(temperature):
    def fn(h, w, y):
        h, w = h.astype(jnp.float32), w.astype(jnp.float32)  # float32 source of truth
        return lp.token_logprobs_reference(h, w, y, temperature=temperature)

    return fn


def backend_fn(impl, temperature, **kw):
    def fn(h, w, y):
        return lp.token_logprobs(
            h, w, y, temperature=temperature, implementation=impl, interpret=INTERPRET[impl], **kw
        )

    return fn


def contains_primitive(jaxpr, name):
    """Whether ``name`` occurs anywhere in ``jaxpr``, nested jaxprs included."""
    return any(name == eqn.primitive.name for eqn in _all_eqns(jaxpr))


def _all_eqns(jaxpr):
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    for eqn in jaxpr.eqns:
        yield eqn
        for param in eqn.params.values():
            for sub in param if isinstance(param, list | tuple) else [param]:
                if isinstance(sub, jax.extend.core.Jaxpr | jax.extend.core.ClosedJaxpr):
                    yield from _all_eqns(sub)


def largest_intermediate(jaxpr):
    sizes = [0]
    for eqn in _all_eqns(jaxpr):
        sizes += [math.prod(getattr(v.aval, "shape", ())) for v in eqn.outvars]
    return max(sizes)


# --------------------------------------------------------------------------- reference by hand


def test_reference_uniform_when_hidden_is_zero():
    logp, ent = lp.token_logprobs_reference(
        jnp.zeros((2, 3, 4)), jnp.ones((4, 10)), jnp.array([[0, 5, 9], [1, 2, 3]])
    )
    np.testing.assert_allclose(logp, np.full((2, 3), -np.log(10)), rtol=1e-6)
    np.testing.assert_allclose(ent, np.full((2, 3), np.log(10)), rtol=1e-6)


# Two-word vocabulary with logits (0, ln 3): p = (1/4, 3/4). At temperature 2 the logits are
# (0, ln 3 / 2): p = (1, sqrt 3) / (1 + sqrt 3).
HAND_H, HAND_W = jnp.ones((1, 1, 1)), jnp.array([[0.0, math.log(3.0)]])


@pytest.mark.parametrize("temperature,p1", [(1.0, 0.75), (2.0, math.sqrt(3) / (1 + math.sqrt(3)))])
def test_reference_hand_worked(temperature, p1):
    y = jnp.array([[1]])
    logp, ent = lp.token_logprobs_reference(HAND_H, HAND_W, y, temperature=temperature)
    np.testing.assert_allclose(logp, [[math.log(p1)]], rtol=1e-6)
    want_ent = -(p1 * math.log(p1) + (1 - p1) * math.log(1 - p1))
    np.testing.assert_allclose(ent, [[want_ent]], rtol=1e-6)


def test_reference_hand_worked_gradient():
    # d logp / d logits = onehot - p = (-1/4, 1/4); dW = h (x) that; dh = W . that = ln3 / 4.
    fn = lambda h, w: lp.token_logprobs_reference(h, w, jnp.array([[1]]))[0].sum()
    dh, dw = jax.grad(fn, argnums=(0, 1))(HAND_H, HAND_W)
    np.testing.assert_allclose(dw, [[-0.25, 0.25]], rtol=1e-6)
    np.testing.assert_allclose(dh, [[[math.log(3.0) / 4]]], rtol=1e-6)


def test_reference_out_of_range_target_is_minus_lse():
    logp, _ = lp.token_logprobs_reference(HAND_H, HAND_W, jnp.array([[-1]]))
    np.testing.assert_allclose(logp, [[-math.log(4.0)]], rtol=1e-6)


# --------------------------------------------------------------------------- backends by hand

BACKEND_BLOCKS = {  # smallest legal blocks per backend
    "xla": dict(block_t=8, block_v=16),
    "pallas_tpu": dict(block_t=8, block_v=128),
    "pallas_gpu": dict(block_t=16, block_v=16),
}


@pytest.mark.parametrize("impl", sorted(INTERPRET))
def test_backend_hand_worked(impl):
    y = jnp.array([[1]])
    # D = 1 is too narrow for the GPU kernel's 16-wide dot chunks: pad D with zeros.
    h, w = jnp.pad(HAND_H, ((0, 0), (0, 0), (0, 15))), jnp.pad(HAND_W, ((0, 15), (0, 0)))
    fn = backend_fn(impl, 2.0, **BACKEND_BLOCKS[impl])
    logp, ent = fn(h, w, y)
    p1 = math.sqrt(3) / (1 + math.sqrt(3))
    np.testing.assert_allclose(logp, [[math.log(p1)]], rtol=1e-6)
    np.testing.assert_allclose(
        ent, [[-(p1 * math.log(p1) + (1 - p1) * math.log(1 - p1))]], rtol=1e-6
    )
    dw = jax.grad(lambda w: fn(h, w, y)[0].sum())(w)
    # d logp / d logits = (onehot - p) / temperature.
    np.testing.assert_allclose(dw[0], [-(1 - p1) / 2, (1 - p1) / 2], rtol=1e-6)


# --------------------------------------------------------------------------- backends vs reference

# (B, T, D, V): T*B and V are not multiples of the blocks, except the last (exact multiples) and
# the second (a single block larger than the whole problem on both axes).
SHAPES = [(2, 13, 32, 300), (1, 5, 16, 40), (2, 16, 32, 256)]
BLOCKS = {
    "xla": [dict(block_t=8, block_v=64), dict(block_t=32, block_v=128)],
    "pallas_tpu": [dict(block_t=8, block_v=128), dict(block_t=16, block_v=256)],
    "pallas_gpu": [dict(block_t=16, block_v=64), dict(block_t=32, block_v=128)],
}
CASES = [
    pytest.param(impl, shape, blocks, id=f"{impl}-{'x'.join(map(str, shape))}-{i}")
    for impl in sorted(INTERPRET)
    for shape in SHAPES
    for i, blocks in enumerate(BLOCKS[impl])
    if i == 0 or shape == SHAPES[0]  # second blocks only on the ragged shape
]


def _check_against_reference(impl, shape, blocks, dtype, temperature):
    hidden, unembed, targets, mask, key = make_inputs(*shape, dtype=dtype)
    want = value_and_grads(reference_fn(temperature), hidden, unembed, targets, mask, key)
    before = (sum(pallas_tpu.TRACE_COUNTS.values()), sum(pallas_gpu.TRACE_COUNTS.values()))
    got = value_and_grads(
        backend_fn(impl, temperature, **blocks), hidden, unembed, targets, mask, key
    )
    after = (sum(pallas_tpu.TRACE_COUNTS.values()), sum(pallas_gpu.TRACE_COUNTS.values()))
    if impl == "pallas_tpu":
        assert after[0] > before[0], "the TPU kernel bodies were not traced"
    if impl == "pallas_gpu":
        assert after[1] > before[1], "the GPU kernel body was not traced"
    tol = TOLERANCES[dtype]
    for name, g, w, kind in zip(
        ("logp", "entropy", "d/dhidden", "d/dunembed"),
        got,
        want,
        ("fwd", "fwd", "grad", "grad"),
        strict=True,
    ):
        assert_close(g, w, tol[kind], f"{impl} {shape} {blocks} {dtype.__name__} {name}")
    assert got[2].dtype == dtype and got[3].dtype == dtype


@pytest.mark.parametrize("impl,shape,blocks", CASES)
def test_matches_reference_float32(impl, shape, blocks):
    _check_against_reference(impl, shape, blocks, jnp.float32, temperature=0.7)


@pytest.mark.parametrize("impl", sorted(INTERPRET))
def test_matches_reference_bfloat16(impl):
    _check_against_reference(impl, SHAPES[0], BLOCKS[impl][0], jnp.bfloat16, temperature=1.3)


@pytest.mark.parametrize("impl", sorted(INTERPRET))
def test_large_logits_are_stable(impl):
    # Hidden states scaled by 30: logits in the hundreds; a non-online softmax would overflow.
    hidden, unembed, targets, mask, key = make_inputs(2, 13, 32, 300, scale=30.0)
    want = value_and_grads(reference_fn(0.5), hidden, unembed, targets, mask, key)
    got = value_and_grads(
        backend_fn(impl, 0.5, **BLOCKS[impl][0]), hidden, unembed, targets, mask, key
    )
    for name, g, w in zip(("logp", "entropy", "dh", "dw"), got, want, strict=True):
        assert_close(g, w, 1e-5, f"{impl} {name}")


@pytest.mark.parametrize("impl", sorted(INTERPRET))
def test_without_entropy(impl):
    hidden, unembed, targets, mask, _ = make_inputs(1, 5, 16, 40)
    fn = lambda h, w: lp.token_logprobs(
        h, w, targets, temperature=0.7, return_entropy=False, implementation=impl,
        interpret=INTERPRET[impl], **BLOCKS[impl][0],
    )  # fmt: skip
    logp, ent = fn(hidden, unembed)
    assert ent is None
    want_logp, _ = lp.token_logprobs_reference(hidden, unembed, targets, temperature=0.7)
    assert_close(logp, want_logp, 1e-5, f"{impl} logp")
    loss = lambda f: lambda h, w: jnp.sum(mask * f(h, w)[0])
    ref = lambda h, w: lp.token_logprobs_reference(h, w, targets, temperature=0.7)
    got = jax.grad(loss(fn), argnums=(0, 1))(hidden, unembed)
    want = jax.grad(loss(ref), argnums=(0, 1))(hidden, unembed)
    for name, g, w in zip(("dh", "dw"), got, want, strict=True):
        assert_close(g, w, 1e-5, f"{impl} {name}")


def test_gpu_vocab_splits_merge_exactly():
    hidden, unembed, targets, _, _ = make_inputs(2, 13, 32, 300)
    n = 26
    h_nd, y_n = hidden.reshape(n, 32), targets.reshape(n)
    want_logp, want_ent = lp.token_logprobs_reference(hidden, unembed, targets, temperature=0.7)
    for splits in (2, 3):
        config = BlockConfig(block_t=16, block_v=64, block_d=16, num_v_splits=splits)
        logp, ent, _ = pallas_gpu.forward(
            h_nd, unembed, y_n, inv_temp=1 / 0.7, config=config, with_entropy=True, interpret=True
        )
        assert_close(logp.reshape(2, 13), want_logp, 1e-5, f"{splits} splits logp")
        assert_close(ent.reshape(2, 13), want_ent, 1e-5, f"{splits} splits entropy")


# --------------------------------------------------------------------------- interpret really ran


def test_tpu_interpret_visits_every_grid_point():
    hidden, unembed, targets, mask, key = make_inputs(2, 13, 32, 300)
    visits = []

    def record(token, point, core):  # called by the interpreter at every grid point it runs
        visits.append(point)
        return token

    params = pltpu.InterpretParams(grid_point_recorder=record)
    fn = lambda h, w, y: lp.token_logprobs(
        h, w, y, temperature=0.7, implementation="pallas_tpu", interpret=params,
        block_t=8, block_v=128,
    )  # fmt: skip
    value_and_grads(fn, hidden, unembed, targets, mask, key)
    grid = math.ceil(26 / 8) * math.ceil(300 / 128)  # 4 row blocks x 3 vocabulary blocks
    assert len(visits) == 3 * grid  # forward, dh and dW kernels
    assert {tuple(int(c) for c in p) for p in visits} == {
        (i, j) for i in range(4) for j in range(3)
    } | {(j, i) for i in range(4) for j in range(3)}


@pytest.mark.parametrize("impl", ["pallas_tpu", "pallas_gpu"])
def test_program_contains_pallas_call(impl):
    hidden, unembed, targets, mask, _ = make_inputs(1, 5, 16, 40)
    loss = lambda h, w: jnp.sum(mask * backend_fn(impl, 1.0)(h, w, targets)[0])
    jaxpr = jax.make_jaxpr(jax.grad(loss, argnums=(0, 1)))(hidden, unembed)
    assert contains_primitive(jaxpr, "pallas_call")


# --------------------------------------------------------------------------- memory


@pytest.mark.parametrize("impl", sorted(INTERPRET))
def test_never_builds_token_by_vocab_array(impl):
    # Forward + backward with default blocks, traced only (not run): no intermediate anywhere in
    # the program (nested scans and kernel bodies included) comes near N x V; the largest are
    # the [D, V] gradient and, for xla and pallas_gpu's backward, one 1024 x 2048 logit tile.
    b, t, d, v = 4, 1024, 32, 8192
    hidden, unembed, targets, mask, _ = make_inputs(b, t, d, v)
    fn = backend_fn(impl, 1.0)

    def loss(h, w):
        logp, ent = fn(h, w, targets)
        return jnp.sum(mask * (logp + ent))

    jaxpr = jax.make_jaxpr(jax.grad(loss, argnums=(0, 1)))(hidden, unembed)
    assert largest_intermediate(jaxpr) <= max(d * v, 1024 * 2048) <= b * t * v // 16
    naive = jax.make_jaxpr(jax.grad(lambda h, w: jnp.sum(
        lp.token_logprobs(h, w, targets, implementation="naive")[0]), argnums=(0, 1))
    )(hidden, unembed)  # fmt: skip
    assert largest_intermediate(naive) >= b * t * v  # the check can see [B, T, V]


# --------------------------------------------------------------------------- API and config


def test_default_implementation():
    assert lp.default_implementation("cpu") == "xla"
    assert lp.default_implementation("tpu") == "pallas_tpu"
    assert lp.default_implementation("gpu") == "pallas_gpu"
    assert lp.default_implementation() == "xla"  # the test session runs on CPU


def test_default_path_matches_reference_and_jits():
    hidden, unembed, targets, _, _ = make_inputs(2, 13, 32, 300)
    got = jax.jit(lambda h, w: lp.token_logprobs(h, w, targets, temperature=0.7))(hidden, unembed)
    want = lp.token_logprobs_reference(hidden, unembed, targets, temperature=0.7)
    for g, w in zip(got, want, strict=True):
        assert_close(g, w, 1e-5, "default")


def test_naive_implementation_is_the_reference():
    hidden, unembed, targets, _, _ = make_inputs(1, 5, 16, 40)
    got = lp.token_logprobs(hidden, unembed, targets, implementation="naive")
    want = lp.token_logprobs_reference(hidden, unembed, targets)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)


def test_padded_rows_are_finite_whatever_their_hidden_states():
    hidden, unembed, targets, mask, _ = make_inputs(2, 13, 32, 300)
    hidden = jnp.where(mask[..., None], hidden, 1e4)  # garbage in padded positions
    for impl in sorted(INTERPRET):
        logp, ent = backend_fn(impl, 1.0, **BLOCKS[impl][0])(hidden, unembed, targets)
        assert np.all(np.isfinite(logp)) and np.all(np.isfinite(ent)), impl


def test_input_errors():
    h, w, y = jnp.zeros((1, 2, 4)), jnp.zeros((4, 8)), jnp.zeros((1, 2), jnp.int32)
    with pytest.raises(ValueError, match="implementation"):
        lp.token_logprobs(h, w, y, implementation="cuda")
    with pytest.raises(ValueError, match="temperature"):
        lp.token_logprobs(h, w, y, temperature=0.0)
    with pytest.raises(ValueError, match="Python float"):
        jax.jit(lambda t: lp.token_logprobs(h, w, y, temperature=t))(1.0)
    with pytest.raises(ValueError, match="integer"):
        lp.token_logprobs(h, w, y.astype(jnp.float32))
    with pytest.raises(AssertionError):
        lp.token_logprobs(h[0], w, y)  # rank


@pytest.mark.parametrize(
    "impl,config,match",
    [
        ("pallas_tpu", BlockConfig(block_t=12, block_v=128), "block_t=12 must be a multiple of 8"),
        (
            "pallas_tpu",
            BlockConfig(block_t=8, block_v=200),
            "block_v=200 must be a multiple of 128",
        ),
        (
            "pallas_gpu",
            BlockConfig(block_t=48, block_v=64, block_d=16),
            "block_t=48 must be a power of 2",
        ),
        (
            "pallas_gpu",
            BlockConfig(block_t=16, block_v=64, block_d=64),
            "block_d=64 must divide model_dim=96",
        ),
        ("pallas_gpu", BlockConfig(16, 64, 32, num_v_splits=9), "num_v_splits=9 must be at most"),
        ("naive", BlockConfig(8, 8), "has no block config"),
    ],
)
def test_config_errors_are_readable(impl, config, match):
    with pytest.raises(ValueError, match=match):
        config.fit(impl, tokens=1000, vocab=500, model_dim=96)


def test_config_fit_clamps_to_problem():
    assert BlockConfig(256, 512).fit("pallas_tpu", tokens=5, vocab=40, model_dim=16) == BlockConfig(
        8, 128
    )
    assert BlockConfig(1024, 2048).fit("xla", tokens=5, vocab=40, model_dim=16) == BlockConfig(
        5, 40
    )
    fitted = default_config("pallas_gpu", model_dim=576).fit(
        "pallas_gpu", tokens=5, vocab=40, model_dim=576
    )
    assert fitted == BlockConfig(16, 64, 64)
    assert default_config("pallas_gpu", model_dim=48).block_d == 16
    with pytest.raises(ValueError, match="positive"):
        BlockConfig(block_t=0, block_v=8)
    with pytest.raises(dataclasses.FrozenInstanceError):
        BlockConfig(8, 8).block_t = 16


def test_merge_stats_equals_one_pass():
    z = jax.random.normal(jax.random.key(1), (3, 40)) * 5
    cols = jnp.arange(40)[None]
    y = jnp.array([[3], [39], [20]])
    one = chunked.update_stats(chunked.init_stats(3), z, cols, None, y, with_entropy=True)
    parts = [
        chunked.update_stats(
            chunked.init_stats(3), z[:, a:b], cols[:, a:b], None, y, with_entropy=True
        )
        for a, b in ((0, 16), (16, 40))
    ]
    merged = chunked.merge_stats(jax.tree.map(lambda *x: jnp.stack(x), *parts))
    for a, b in zip(chunked.finalize_stats(one), chunked.finalize_stats(merged), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6)


def test_public_names_have_docstrings():
    for name in lp.__all__:
        obj = getattr(lp, name)
        if isinstance(obj, tuple):  # IMPLEMENTATIONS: documented in config.py
            continue
        assert obj.__doc__ and obj.__doc__.strip(), name
