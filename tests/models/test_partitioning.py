"""Layout hints inside the model (jaxrl_llm.models.partitioning) on 8 fake CPU devices: without
a layout they do nothing; with one, the layer scan gathers each layer's FSDP shards inside the
loop (one layer at a time), the log-probs run vocabulary-parallel, and the numbers stay those of
the unhinted program."""

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxrl_llm.models import init_model, tiny_config
from jaxrl_llm.models.partitioning import constrain, constrain_params, current_layout, use_layout
from jaxrl_llm.scale import hlo
from jaxrl_llm.sharding import TRAIN_RULES, layout, make_mesh, param_shardings
from jaxrl_llm.training.logprobs import sequence_logprobs

CONFIG = tiny_config(num_layers=3, vocab_size=512)


def test_no_layout_no_hints():
    state = nnx.state(init_model(CONFIG), nnx.Param)
    assert current_layout() is None
    assert constrain_params(state, gathered=True) is state
    x = jnp.ones((2, 3))
    assert constrain(x, ("batch", None)) is x
    # A one-device mesh needs no hints either.
    with use_layout(layout(make_mesh((1, 1), ("data", "model"), devices=jax.devices()[:1]),
                           TRAIN_RULES)):  # fmt: skip
        assert current_layout() is None


def _loss_and_grads(mesh, hinted: bool):
    model = init_model(CONFIG)
    graphdef, params = nnx.split(model, nnx.Param)
    params = jax.device_put(params, param_shardings(params, mesh, TRAIN_RULES))
    tokens = jax.random.randint(jax.random.key(0), (8, 16), 0, CONFIG.vocab_size)

    def loss(params, tokens):
        logp, _ = sequence_logprobs(nnx.merge(graphdef, params), tokens, remat=True)
        return logp.sum()

    step = jax.jit(jax.value_and_grad(loss))
    if not hinted:
        return step(params, tokens), None
    with use_layout(layout(mesh, TRAIN_RULES)):
        lowered = step.lower(params, tokens)
        result = step(params, tokens)
    return result, lowered.compile().as_text()


def test_fsdp_gathers_inside_the_layer_loop_and_numbers_hold():
    mesh = make_mesh((4, 2), ("data", "model"))
    (loss, grads), _ = _loss_and_grads(mesh, hinted=False)
    (hinted_loss, hinted_grads), text = _loss_and_grads(mesh, hinted=True)
    np.testing.assert_allclose(hinted_loss, loss, rtol=1e-5)
    for a, b in zip(jax.tree.leaves(hinted_grads), jax.tree.leaves(grads), strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5)
    ops = hlo.collectives(text, mesh.devices.flat)
    # Weights gathered over "data" inside the scan: forward, recompute and backward loops.
    in_loops = [op for op in ops if op.kind == "all-gather" and op.runs == CONFIG.num_layers]
    assert in_loops
    # The [D, V] unembedding is never all-gathered whole (vocabulary-parallel log-probs).
    unembedding = CONFIG.hidden_size * CONFIG.vocab_size * 4
    assert all(op.result_bytes < unembedding for op in ops if op.kind == "all-gather")
