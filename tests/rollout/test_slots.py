"""SlotDecoder (continuous batching, the JetStream engine's core) equals greedy `generate`."""

import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxrl_llm.rollout import generate
from jaxrl_llm.rollout.slots import SlotDecoder

N_NEW = 6
PROMPTS = [[5, 17, 3], [9, 1, 22, 40, 41, 42, 7, 8, 100, 2], [77]]


def _padded(prompt, length=16):
    out = np.zeros(length, np.int32)
    out[: len(prompt)] = prompt
    return jnp.asarray(out)


def test_staggered_inserts_match_generate(tiny_model):
    expected = generate(tiny_model, PROMPTS, max_new_tokens=N_NEW, temperature=0.0).completions()
    decoder = SlotDecoder(tiny_model, num_slots=4, max_length=32)
    params = nnx.state(tiny_model)
    state = decoder.init_state()
    slot_of = {0: 2, 1: 0, 2: 3}
    got = {i: [] for i in range(len(PROMPTS))}

    def step(state, live):
        state, out = decoder.generate(params, state)
        for i in live:
            if len(got[i]) < N_NEW:
                got[i].append(int(out.tokens[slot_of[i]]))
                assert bool(out.valid[slot_of[i]]) and int(out.lengths[slot_of[i]]) == len(got[i])
        return state

    # Requests arrive while others decode: insert 0, step twice, insert 1, step, insert 2, ...
    for i, prompt in enumerate(PROMPTS):
        prefix = decoder.prefill(params, _padded(prompt), jnp.int32(len(prompt)))
        state = decoder.insert(prefix, state, jnp.int32(slot_of[i]))
        for _ in range(2):
            state = step(state, range(i + 1))
    while any(len(v) < N_NEW for v in got.values()):
        state = step(state, range(len(PROMPTS)))
    assert [got[i] for i in range(len(PROMPTS))] == expected

    # Reusing a slot: a new request in slot 2 starts from a clean history.
    prefix = decoder.prefill(params, _padded(PROMPTS[2]), jnp.int32(1))
    state = decoder.insert(prefix, state, jnp.int32(2))
    tokens = []
    for _ in range(N_NEW):
        state, out = decoder.generate(params, state)
        tokens.append(int(out.tokens[2]))
    assert tokens == expected[2]


def test_valid_turns_false_past_max_length(tiny_model):
    decoder = SlotDecoder(tiny_model, num_slots=1, max_length=4)
    params = nnx.state(tiny_model)
    state = decoder.init_state()
    prefix = decoder.prefill(params, jnp.asarray([1, 2, 3, 0], jnp.int32), jnp.int32(3))
    state = decoder.insert(prefix, state, jnp.int32(0))
    valid = []
    for _ in range(3):
        state, out = decoder.generate(params, state)
        valid.append(bool(out.valid[0]))
    # Feeds positions 2 and 3 (the last cache slot), then position 4 does not fit.
    assert valid == [True, True, False]
