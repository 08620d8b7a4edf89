"""generate(): greedy vs a no-cache reference, exact log-probs, stops, layout, seeds, no recompile."""

import functools
import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrl_llm.rollout as rollout_pkg
from jaxrl_llm.rollout import FinishReason, GenerationConfig, Generator, generate, trace_count
from jaxrl_llm.rollout import engine as engine_module

N_NEW = 6
PROMPTS = [[5, 17, 3], [9, 1, 22, 40, 41, 42, 7, 8, 100, 2], [77]]


@pytest.fixture
def model(tiny_model):
    return tiny_model


@functools.cache
def _full_forward(model):
    return jax.jit(lambda tokens: model(tokens).astype(jnp.float32))


def _reference_greedy(model, prompts, n_new):
    """Step-by-step argmax of the full causal forward, no cache (host loop, one shape)."""
    width = max(len(p) for p in prompts) + n_new
    tokens = np.zeros((len(prompts), width), np.int32)
    for b, p in enumerate(prompts):
        tokens[b, : len(p)] = p
    forward = _full_forward(model)
    for j in range(n_new):
        logits = np.asarray(forward(jnp.asarray(tokens)))
        for b, p in enumerate(prompts):
            tokens[b, len(p) + j] = logits[b, len(p) + j - 1].argmax()
    return [tokens[b, len(p) : len(p) + n_new].tolist() for b, p in enumerate(prompts)]


def _teacher_forced(model, rollout, temperature):
    """log_softmax(model(tokens) / temperature) at each token, aligned with `tokens`."""
    logits = _full_forward(model)(rollout.tokens)
    logp = jax.nn.log_softmax(logits / temperature, axis=-1)
    per_token = jnp.take_along_axis(logp[:, :-1], rollout.tokens[:, 1:, None], axis=-1)[..., 0]
    per_token = jnp.pad(per_token, ((0, 0), (1, 0)))
    return jnp.where(rollout.completion_mask, per_token, 0.0)


def test_greedy_equals_no_cache_argmax(model):
    r = generate(model, PROMPTS, max_new_tokens=N_NEW, temperature=0.0)
    expected = _reference_greedy(model, PROMPTS, N_NEW)
    assert r.completions() == expected
    # Not a degenerate model: the completions are not constant.
    assert len({t for c in expected for t in c}) > 4
    np.testing.assert_array_equal(r.logprobs, 0.0)  # greedy samples a point mass


def test_layout(model):
    r = generate(model, PROMPTS, max_new_tokens=N_NEW, temperature=1.0, seed=3)
    b, t = r.tokens.shape
    assert b == 3 and t == 16 + N_NEW  # prompt bucket 16
    np.testing.assert_array_equal(r.prompt_lengths, [3, 10, 1])
    np.testing.assert_array_equal(r.lengths, [N_NEW] * 3)
    assert r.finish_reason_names() == ["length"] * 3
    tokens, mask = np.asarray(r.tokens), np.asarray(r.completion_mask)
    for i, p in enumerate(PROMPTS):
        np.testing.assert_array_equal(tokens[i, : len(p)], p)
        expected_mask = np.zeros(t, bool)
        expected_mask[len(p) : len(p) + N_NEW] = True
        np.testing.assert_array_equal(mask[i], expected_mask)
        np.testing.assert_array_equal(tokens[i, len(p) + N_NEW :], 0)  # pad_id
    assert np.all(np.asarray(r.logprobs)[~mask] == 0) and np.all(np.asarray(r.logprobs)[mask] < 0)
    np.testing.assert_array_equal(r.sequence_mask, mask | np.asarray(r.prompt_mask))


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_logprobs_equal_teacher_forced(model, temperature):
    r = generate(model, PROMPTS, max_new_tokens=N_NEW, temperature=temperature, seed=11)
    np.testing.assert_allclose(r.logprobs, _teacher_forced(model, r, temperature), atol=1e-5)
    np.testing.assert_allclose(r.raw_logprobs, _teacher_forced(model, r, 1.0), atol=1e-5)


def test_filtered_logprobs_equal_teacher_forced(model):
    kwargs = dict(temperature=0.9, top_k=20, top_p=0.8, min_p=0.01)
    r = generate(model, PROMPTS, max_new_tokens=N_NEW, seed=5, **kwargs)
    logits = _full_forward(model)(r.tokens)
    table = rollout_pkg.sampling_logprobs(
        logits,
        temperature_b=jnp.full((3,), 0.9),
        top_k=20,
        top_p_b=jnp.full((3,), 0.8),
        min_p_b=jnp.full((3,), 0.01),
    )
    per_token = jnp.take_along_axis(table[:, :-1], r.tokens[:, 1:, None], axis=-1)[..., 0]
    per_token = jnp.where(r.completion_mask[:, 1:], per_token, 0.0)
    assert np.isfinite(np.asarray(per_token)).all()  # every sampled token is inside the support
    np.testing.assert_allclose(r.logprobs[:, 1:], per_token, atol=1e-5)
    np.testing.assert_allclose(r.raw_logprobs, _teacher_forced(model, r, 1.0), atol=1e-5)


def test_near_zero_temperature_is_greedy(model):
    cold = generate(model, PROMPTS, max_new_tokens=N_NEW, temperature=1e-6, seed=1)
    greedy = generate(model, PROMPTS, max_new_tokens=N_NEW, temperature=0.0)
    assert cold.completions() == greedy.completions()


def test_same_seed_alone_or_in_batch_of_8(model):
    prompt = PROMPTS[1]
    others = [[3, 4], [8] * 7, [1, 2, 3, 4, 5], [60], [61, 62], [9, 9, 9], [100, 101, 102]]
    kw = dict(max_new_tokens=N_NEW, temperature=1.0, top_p=0.95)
    alone = generate(model, [prompt], seed=42, **kw)
    batch = generate(model, [prompt] + others, seed=42, **kw)  # row 0 keeps key fold_in(42, 0)
    assert batch.completions()[0] == alone.completions()[0]
    np.testing.assert_allclose(
        batch.logprobs[0, : alone.tokens.shape[1]], alone.logprobs[0], atol=1e-5
    )
    # Per-prompt seeds make the row's randomness independent of its index too.
    moved = generate(
        model, others[:5] + [prompt] + others[5:], seed=[1, 2, 3, 4, 5, 42, 6, 7], **kw
    )
    alone_seeded = generate(model, [prompt], seed=[42], **kw)
    assert moved.completions()[5] == alone_seeded.completions()[0]
    # Different seeds give different samples (vocabulary 256: a collision of 6 tokens is ~0).
    other_seed = generate(model, [prompt], seed=43, **kw)
    assert other_seed.completions()[0] != alone.completions()[0]


def test_eos_and_stop_sequences(model):
    greedy = generate(model, PROMPTS, max_new_tokens=N_NEW, temperature=0.0).completions()
    # EOS: row 1's third greedy token; the row stops there and keeps the EOS token.
    eos = greedy[1][2]
    r = generate(model, PROMPTS, max_new_tokens=N_NEW, temperature=0.0, eos_ids=[eos])
    comps = r.completions()
    assert comps[1] == greedy[1][:3]
    assert int(r.finish_reason[1]) == FinishReason.EOS and int(r.lengths[1]) == 3
    for b in (0, 2):  # other rows stop at their own first EOS, or run to the length limit
        first = greedy[b].index(eos) + 1 if eos in greedy[b] else N_NEW
        assert comps[b] == greedy[b][:first]
    tokens = np.asarray(r.tokens)
    np.testing.assert_array_equal(tokens[1, 10 + 3 :], 0)  # padding after the EOS
    assert not np.asarray(r.completion_mask)[1, 10 + 3 :].any()

    # Stop sequence: row 0's tokens 2..3 (a two-token sequence inside the completion).
    stop = greedy[0][2:4]
    r = generate(
        model, PROMPTS, max_new_tokens=N_NEW, temperature=0.0, eos_ids=(), stop_sequences=[stop]
    )
    assert r.completions()[0] == greedy[0][:4]
    assert r.finish_reason_names()[0] == "stop"
    # A stop sequence spanning the prompt's last token and the first completion token does not
    # match: stop sequences are matched inside the completion only.
    span = [PROMPTS[2][-1], greedy[2][0]]
    r = generate(
        model, PROMPTS, max_new_tokens=N_NEW, temperature=0.0, eos_ids=(), stop_sequences=[span]
    )
    assert r.completions()[2][:2] == greedy[2][:2] and int(r.lengths[2]) >= 2


def test_loop_stops_early_when_all_rows_finish(model):
    greedy = generate(model, [PROMPTS[0]], max_new_tokens=N_NEW, temperature=0.0).completions()
    r = generate(model, [PROMPTS[0]], max_new_tokens=N_NEW, temperature=0.0, eos_ids=[greedy[0][0]])
    assert r.completions() == [greedy[0][:1]] and int(r.lengths[0]) == 1


def test_second_call_does_not_recompile(model):
    gen = Generator(model, GenerationConfig(max_new_tokens=N_NEW, temperature=0.8, top_k=30))
    gen([[1, 2, 3], [4, 5]], seed=0)
    traces, compiled = trace_count(), engine_module._generate_padded._cache_size()
    # Different prompts, lengths and batch size inside the same buckets (prompt 16, batch 2),
    # another seed and temperature: the same program.
    gen([[7, 8, 9, 10, 11, 12], [13]], seed=5)
    Generator(model, gen.config.replace(temperature=0.3))([[1], [2, 3, 4]], seed=1)
    assert trace_count() == traces
    assert engine_module._generate_padded._cache_size() == compiled
    # A new bucket does compile (the counter really counts).
    gen([[1] * 17, [2]], seed=0)
    assert trace_count() == traces + 1


def test_batch_padding_rows_are_dropped(model):
    r = generate(model, PROMPTS[:2] + [[3, 3], [4], [6]], max_new_tokens=2, temperature=0.0)
    # 5 prompts -> batch bucket 6; the padding row is sliced off.
    assert r.tokens.shape == (5, 18) and r.lengths.shape == (5,)
    assert r.completions()[:2] == [c[:2] for c in _reference_greedy(model, PROMPTS[:2], 2)]


def test_invalid_arguments(model):
    with pytest.raises(ValueError, match="empty"):
        generate(model, [[1], []], max_new_tokens=2)
    with pytest.raises(ValueError, match="top_p"):
        generate(model, [[1]], max_new_tokens=2, top_p=0.0)
    with pytest.raises(ValueError, match="max_new_tokens"):
        generate(model, [[1]], max_new_tokens=0)
    with pytest.raises(ValueError, match="temperature"):
        generate(model, [[1]], max_new_tokens=2, temperature=-1.0)


def test_public_names_have_docstrings():
    for name in rollout_pkg.__all__:
        if name == "JetStreamEngine":
            continue  # needs the jetstream extra; documented in its own module
        obj = getattr(rollout_pkg, name)
        if inspect.isclass(obj) or inspect.isfunction(obj):
            assert obj.__doc__ and obj.__doc__.strip(), name
