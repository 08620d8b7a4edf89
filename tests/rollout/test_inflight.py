"""In-flight weight updates (PipelineRL): chunked decoding that switches weights between chunks."""

import jax
import numpy as np
import pytest
from flax import nnx

from jaxrl_llm.models import init_model, tiny_config
from jaxrl_llm.rollout import GenerationConfig, Generator
from jaxrl_llm.rollout.inflight import generate_inflight, token_versions

N_NEW = 20


def _prompts(seed=0, count=8):
    rng = np.random.default_rng(seed)
    return [rng.integers(1, 250, size=rng.integers(3, 12)).tolist() for _ in range(count)]


def _generator(model, **options):
    config = GenerationConfig(max_new_tokens=N_NEW, temperature=1.0, eos_ids=(7,), **options)
    return Generator(model, config)


class ScriptedWeights:
    """A weights source that hands out `versions[i]` (and its params) on its i-th call, then the
    last one: a learner that publishes at known points of the decode."""

    def __init__(self, versions, params_of):
        self.versions, self.params_of, self.calls = list(versions), params_of, 0

    def __call__(self):
        v = self.versions[min(self.calls, len(self.versions) - 1)]
        self.calls += 1
        return v, self.params_of[v]


@pytest.mark.parametrize("chunk_tokens", [1, 3, N_NEW])
@pytest.mark.parametrize("compaction", [True, False])
def test_one_version_equals_the_one_program_decode(tiny_model, chunk_tokens, compaction):
    gen = _generator(tiny_model, compaction=compaction, min_compact_batch=2)
    prompts = [p for p in _prompts() for _ in range(2)]  # groups: the prefill shares rows
    budgets = np.random.default_rng(1).integers(1, N_NEW + 1, size=len(prompts))
    expected, work = gen.generate_with_work(prompts, seed=5, max_new_tokens=budgets)
    params = nnx.state(tiny_model)
    out = generate_inflight(
        gen,
        prompts,
        seed=5,
        weights=ScriptedWeights([3], {3: params}),
        chunk_tokens=chunk_tokens,
        max_new_tokens=budgets,
    )
    expected = jax.device_get(expected)
    for name in ("tokens", "completion_mask", "lengths", "finish_reason"):
        np.testing.assert_array_equal(getattr(out.rollout, name), getattr(expected, name))
    np.testing.assert_allclose(out.rollout.logprobs, expected.logprobs, atol=1e-5, rtol=0)
    for a, b in zip(jax.device_get(out.work), jax.device_get(work), strict=True):
        np.testing.assert_array_equal(a, b)
    assert out.switches == 0
    mask = np.asarray(expected.completion_mask)
    assert np.all(out.versions_bt[mask] == 3) and np.all(out.versions_bt[~mask] == -1)


def test_a_switch_keeps_the_cache_and_tags_every_token():
    """Weights A for the prefill and the first chunk, B after: the tokens before the switch are
    A's, those after differ from an A-only decode, and each token carries its version."""
    model_a = init_model(tiny_config(tie_word_embeddings=False), seed=0)
    model_b = init_model(tiny_config(tie_word_embeddings=False), seed=1)
    params = {0: nnx.state(model_a), 1: nnx.state(model_b)}
    gen = _generator(model_a, compaction=False)
    prompts, chunk = _prompts(count=4), 4
    only_a = generate_inflight(
        gen, prompts, seed=2, weights=ScriptedWeights([0], params), chunk_tokens=chunk
    )
    source = ScriptedWeights([0, 0, 1], params)  # prefill, chunk 1 (steps 1-4): A; then B
    mixed = generate_inflight(gen, prompts, seed=2, weights=source, chunk_tokens=chunk)
    assert mixed.switches == 1
    switch_step = 1 + chunk  # the first token comes from the prefill
    long_enough = np.asarray(mixed.rollout.lengths) > switch_step
    assert long_enough.any()
    for b in range(len(prompts)):
        p = int(mixed.rollout.prompt_lengths[b])
        n = int(mixed.rollout.lengths[b])
        # Before the switch: A's tokens (same keys, same weights).
        head = min(n, switch_step)
        np.testing.assert_array_equal(
            mixed.rollout.tokens[b, p : p + head], only_a.rollout.tokens[b, p : p + head]
        )
        np.testing.assert_array_equal(mixed.versions_bt[b, p : p + head], 0)
        np.testing.assert_array_equal(mixed.versions_bt[b, p + head : p + n], 1)
        assert np.all(np.diff(mixed.versions_bt[b, p : p + n]) >= 0)
    # After the switch the log-probs are B's: the same sampled stream is no longer A's.
    after = mixed.versions_bt == 1
    assert after.any()
    assert not np.allclose(mixed.rollout.logprobs[after], only_a.rollout.logprobs[after])
    np.testing.assert_array_equal(mixed.step_versions[:switch_step], 0)


def test_token_versions_layout():
    class R:
        completion_mask = np.array([[0, 1, 1, 0], [0, 0, 1, 1]], bool)
        prompt_lengths = np.array([1, 2])

    got = token_versions(np.array([4, 5, -1], np.int32), R)
    np.testing.assert_array_equal(got, [[-1, 4, 5, -1], [-1, -1, 4, 5]])


def test_chunk_tokens_must_be_positive(tiny_model):
    with pytest.raises(ValueError, match="chunk_tokens"):
        generate_inflight(
            _generator(tiny_model),
            _prompts(count=1),
            seed=0,
            weights=lambda: (0, nnx.state(tiny_model)),
            chunk_tokens=0,
        )
