"""The frozen forwards in row chunks (`config.rollout.forward_batch`): the reference's log-probs
and the critic's values of a step equal those of the whole batch at once, on a (2, 4) mesh of
8 CPU devices; a chunk that does not divide the step's rows is named with the ones that do."""

import jax
import numpy as np
import optax
import pytest

from jaxrl_llm.algorithms import registry
from jaxrl_llm.config import config_for, make_tiny
from jaxrl_llm.models import ScalarHeadModel, init_model, tiny_config
from jaxrl_llm.roles import Critic, Reference, forward_batch_of, in_row_chunks
from jaxrl_llm.sharding import make_mesh

ROWS, LENGTH = 8, 12


def _tokens():
    rng = np.random.default_rng(0)
    return rng.integers(1, 256, size=(ROWS, LENGTH)).astype(np.int32)


def _mesh():
    return make_mesh((2, 4), ("data", "model"), devices=jax.devices()[:8])


@pytest.mark.parametrize("chunk", [2, 4])
def test_chunked_reference_logprobs_equal_the_whole_batch(chunk):
    policy = init_model(tiny_config(), seed=0)
    whole = Reference(policy, _mesh(), temperature=0.7).logprobs(_tokens())
    chunked = Reference(policy, _mesh(), temperature=0.7, forward_batch=chunk)
    got = chunked.logprobs(_tokens())
    assert got.shape == (ROWS, LENGTH) and np.all(got[:, 1:] < 0)
    np.testing.assert_allclose(got, whole, rtol=1e-5, atol=1e-5)


def test_chunked_critic_values_equal_the_whole_batch():
    config = make_tiny(config_for("ppo"))
    policy = init_model(tiny_config(), seed=0)
    loss = registry.make(config).critic_loss

    def critic(chunk):
        # a random head (a fresh critic's is zero, which would make every value 0)
        model = ScalarHeadModel.from_policy(policy, seed=0, head_init="normal")
        return Critic(model, optax.adamw(1e-3), loss, _mesh(), forward_batch=chunk)

    whole, chunked = critic(0).values(_tokens()), critic(2).values(_tokens())
    assert np.all(whole[:, 0] == 0) and np.std(whole[:, 1:]) > 0
    np.testing.assert_allclose(chunked, whole, rtol=1e-5, atol=1e-5)


def test_in_row_chunks_calls_the_forward_per_chunk():
    calls = []

    def forward(rows):
        calls.append(rows.shape[0])
        return rows.sum(axis=1)

    tokens = np.arange(12, dtype=np.int32).reshape(6, 2)
    np.testing.assert_array_equal(in_row_chunks(forward, tokens, 2), [1, 5, 9, 13, 17, 21])
    assert calls == [2, 2, 2]
    in_row_chunks(forward, tokens, 0)
    assert calls[-1] == 6  # 0: one call on every row


def test_a_chunk_that_does_not_divide_the_rows_is_named():
    config = make_tiny(config_for("grpo"))  # 2 prompts x 4 = 8 rows
    assert forward_batch_of(config) == 0  # the field absent: every row at once
    with config.unlocked():
        config.rollout.forward_batch = 4
    assert forward_batch_of(config) == 4
    config.rollout.forward_batch = 3
    with pytest.raises(ValueError) as error:
        forward_batch_of(config)
    message = str(error.value)
    assert "config.rollout.forward_batch=3 must divide the 8 rows" in message
    assert "one of [1, 2, 4, 8], or 0" in message and "\n" not in message
