"""The fast forward forms equal the plain ones: 2-D projections, one-query decode attention,
layers scanned or unrolled under every remat policy; and the decode loop copies no weight or
cache (read from the compiled HLO)."""

import math
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jaxrl_llm.models import REMAT_POLICIES, init_model, tiny_config
from jaxrl_llm.models.layers import dense, grouped_query_attention
from jaxrl_llm.models.transformer import remat_policy
from jaxrl_llm.rollout import GenerationConfig, Generator
from jaxrl_llm.rollout.engine import PaddedInputs, _generate_padded
from kernels.decode_attention import masked_decode_attention

RNG = np.random.default_rng(0)


def _normal(*shape):
    return jnp.asarray(RNG.standard_normal(shape), jnp.float32)


def test_dense_equals_multi_axis_einsums():
    x, w_in, w_out = _normal(2, 3, 8), _normal(8, 4, 5), _normal(4, 5, 8)
    np.testing.assert_allclose(
        np.asarray(dense(x, w_in).reshape(2, 3, 4, 5)),
        np.asarray(jnp.einsum("btd,dnh->btnh", x, w_in)),
        rtol=1e-5,
        atol=1e-5,
    )
    y = _normal(2, 3, 4, 5)
    np.testing.assert_allclose(
        np.asarray(dense(y.reshape(2, 3, 20), w_out)),
        np.asarray(jnp.einsum("btnh,nhd->btd", y, w_out)),
        rtol=1e-5,
        atol=1e-5,
    )


@pytest.mark.parametrize("position", [0, 5, 11])
def test_decode_attention_equals_grouped_query_attention(position):
    b, n, k, s, h = 3, 6, 2, 12, 4
    q, keys, values = _normal(b, n, h), _normal(b, k, s, h), _normal(b, k, s, h)
    positions = jnp.asarray([position, min(position + 3, s - 1), 0], jnp.int32)
    mask_b1s = jnp.arange(s)[None, None, :] <= positions[:, None, None]
    expected = grouped_query_attention(q[:, None], keys, values, mask_b1s)[:, 0]
    got = masked_decode_attention(q, keys, values, positions + 1)
    np.testing.assert_allclose(np.asarray(got), np.asarray(expected), rtol=1e-5, atol=1e-6)


def _hidden_and_grads(state, graphdef, tokens, **kwargs):
    def loss(state):
        hidden, _ = nnx.merge(graphdef, state).hidden_states(tokens, **kwargs)
        return jnp.sum(jnp.sin(hidden)), hidden

    (_, hidden), grads = jax.value_and_grad(loss, has_aux=True)(state)
    return hidden, grads


@pytest.mark.parametrize("remat", REMAT_POLICIES)
@pytest.mark.parametrize("packed", [False, True])
def test_scanned_layers_equal_unrolled_in_values_and_gradients(remat, packed):
    model = init_model(tiny_config(num_layers=3), seed=4)
    graphdef, state = nnx.split(model)
    tokens = jax.random.randint(jax.random.PRNGKey(2), (2, 7), 0, 256)
    extra = {}
    if packed:
        extra = dict(
            positions_bt=jnp.asarray([[0, 1, 2, 0, 1, 2, 3]] * 2, jnp.int32),
            segment_ids_bt=jnp.asarray([[1, 1, 1, 2, 2, 2, 2]] * 2, jnp.int32),
        )
    ref_hidden, ref_grads = _hidden_and_grads(
        state, graphdef, tokens, remat="none", scan_layers=False, **extra
    )
    for scan in (True, False):
        hidden, grads = _hidden_and_grads(
            state, graphdef, tokens, remat=remat, scan_layers=scan, **extra
        )
        np.testing.assert_allclose(np.asarray(hidden), np.asarray(ref_hidden), atol=1e-5)
        jax.tree.map(
            lambda a, b: np.testing.assert_allclose(
                np.asarray(a), np.asarray(b), rtol=2e-4, atol=1e-4
            ),
            grads,
            ref_grads,
        )


def test_remat_policy_names():
    assert remat_policy(True) == "full" and remat_policy(False) == "none"
    assert remat_policy("dots") == "dots"
    with pytest.raises(ValueError, match="remat='everything' must be a bool or one of"):
        remat_policy("everything")


def test_full_remat_keeps_less_than_none():
    """XLA's temporaries of a scanned forward + backward shrink under remat="full"."""
    model = init_model(tiny_config(num_layers=4, hidden_size=64, intermediate_size=256), seed=0)
    graphdef, state = nnx.split(model)
    tokens = jnp.zeros((4, 64), jnp.int32)

    def temp_bytes(remat):
        def loss(state):
            hidden, _ = nnx.merge(graphdef, state).hidden_states(tokens, remat=remat)
            return jnp.sum(hidden**2)

        compiled = jax.jit(jax.grad(loss)).lower(state).compile()
        return compiled.memory_analysis().temp_size_in_bytes

    assert temp_bytes("full") < 0.7 * temp_bytes("none")


# --- the compiled decode loop ----------------------------------------------------------------
def _reachable_computations(hlo: str, roots: set[str]) -> dict[str, str]:
    """Text of each HLO computation reachable from `roots` (through calls, fusions, loops)."""
    bodies = {}
    for match in re.finditer(r"^(?:ENTRY )?%(\S+) [^\n]*\{\n(.*?)\n\}", hlo, re.S | re.M):
        bodies[match.group(1)] = match.group(2)
    seen, todo = {}, list(roots)
    while todo:
        name = todo.pop()
        if name in seen or name not in bodies:
            continue
        seen[name] = bodies[name]
        for target in re.findall(
            r"(?:calls|to_apply|body|condition|branch_computations)=(\{[^}]*\}|%[\w.\-]+)",
            bodies[name],
        ):
            todo += re.findall(r"%([\w.\-]+)", target)
    return seen


def test_decode_loop_copies_no_weight_and_no_cache():
    """Inside the while loops of the generate program: no copy or transpose of a weight or cache.

    A multi-axis einsum used to transpose the output projection [N, H, D] every step (a copy
    of every o_proj weight per token); the cache must be updated in place.
    """
    config = tiny_config(hidden_size=40, num_heads=5, num_kv_heads=1, head_dim=12,
                         intermediate_size=72, num_layers=2, vocab_size=300)  # fmt: skip
    model = init_model(config, seed=0)
    graphdef, state = nnx.split(model)
    batch, prompt, new = 16, 16, 8
    stages = (16, 8)  # compaction: a second loop at half the batch
    generator = Generator(model, GenerationConfig(max_new_tokens=new, eos_ids=()))
    static = generator.program_options(batch, copies_rows=False, stages=stages)
    prompt_bt = jnp.ones((batch, prompt), jnp.int32)
    lengths_b = jnp.full((batch,), 5, jnp.int32)
    inputs = PaddedInputs(
        prompt_bt=prompt_bt,
        prefix_l=jnp.zeros((0,), jnp.int32),  # no shared prefix
        suffix_us=prompt_bt,
        suffix_len_u=lengths_b,
        source_b=jnp.arange(batch, dtype=jnp.int32),
        active_b=jnp.ones((batch,), bool),
        options=generator._row_options(lengths_b, batch, 0, None),
        eos_ids_e=jnp.asarray([-1], jnp.int32),
        stop_sw=jnp.full((1, 1), -1, jnp.int32),
    )
    hlo = (
        _generate_padded.lower(
            state, inputs, graphdef=graphdef, static=static, cache_shardings=None
        )
        .compile()
        .as_text()
    )
    loop_bodies = set(re.findall(r" while\([^\n]*body=%([\w.\-]+)", hlo))
    assert len(loop_bodies) >= len(stages), "a while loop per compaction stage"
    inside = "\n".join(_reachable_computations(hlo, loop_bodies).values())
    weight_shapes = {tuple(x.shape) for x in jax.tree.leaves(state) if x.ndim >= 2}
    cache_slots = prompt + new - 1
    forbidden = {s for w in weight_shapes for s in (w, w[::-1])}
    forbidden |= {(b, config.num_kv_heads, cache_slots, config.head_dim) for b in stages}
    # A weight's or a cache's element count under any dimension order.
    sizes = {math.prod(s) for s in forbidden}
    offenders = []
    for line in inside.splitlines():
        op = re.search(r"= \w+\[([\d,]*)\]\{[^}]*\} (copy|transpose)\(", line)
        if op and op.group(1) and math.prod(int(d) for d in op.group(1).split(",")) in sizes:
            offenders.append(line.strip()[:160])
    assert not offenders, "\n".join(offenders)


def test_generator_still_matches_teacher_forcing_after_the_rewrite():
    """Greedy decode through the one-query path picks the cache-free forward's argmax."""
    model = init_model(tiny_config(num_layers=2), seed=1)
    prompts = [[5, 6, 7], [9, 1, 2, 3, 4, 8]]
    out = Generator(model, GenerationConfig(max_new_tokens=6, temperature=0.0, eos_ids=()))(prompts)
    for b, prompt in enumerate(prompts):
        tokens = np.asarray(out.tokens[b, : len(prompt) + 6])
        logits = model(jnp.asarray(tokens[None, :-1]))[0]
        np.testing.assert_array_equal(
            np.asarray(jnp.argmax(logits[len(prompt) - 1 :], -1)), tokens[len(prompt) :]
        )
