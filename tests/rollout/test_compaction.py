"""Rollouts that skip work: compaction, shared prefill and continuous batching against the plain
engine (the same keys must give the same completions).

On the tiny model, XLA:CPU's small matmuls round differently at different batch sizes (about
1e-7 in a logit), so tokens, lengths and finish reasons are compared exactly and log-probs to
float32 rounding; on SmolLM2 (slow target) every matmul is large and everything is bitwise.
"""

import jax
import numpy as np
import pytest

from jaxrl_llm.rollout import (
    ContinuousGenerator,
    GenerationConfig,
    Generator,
    plan_prefill,
)
from jaxrl_llm.rollout.engine import compaction_stages
from jaxrl_llm.rollout.prefix_sharing import PREFIX_QUANTUM, common_prefix_length

N_NEW = 24
PLAIN = dict(compaction=False, prefix_sharing="none")


def _group_prompts(seed=0, unique=8, group=4, head=20):
    rng = np.random.default_rng(seed)
    shared = rng.integers(1, 250, size=head).tolist()
    prompts = [
        shared + rng.integers(1, 250, size=rng.integers(3, 12)).tolist() for _ in range(unique)
    ]
    return [p for p in prompts for _ in range(group)], rng.integers(
        1, N_NEW + 1, size=unique * group
    )


def _assert_same(a, b, *, logprob_atol):
    a, b = jax.device_get(a), jax.device_get(b)
    for name in ("tokens", "completion_mask", "prompt_lengths", "lengths", "finish_reason"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    for name in ("logprobs", "raw_logprobs"):
        np.testing.assert_allclose(
            getattr(a, name), getattr(b, name), atol=logprob_atol, rtol=0, err_msg=name
        )


def _expected_row_steps(budgets, stages, n_new):
    """The compacted loop's row-steps, simulated on the host (no EOS: row b stops at budget b)."""
    budgets = np.asarray(budgets)
    step, total = 1, 0  # the first token comes from prefill
    for i, size in enumerate(stages):
        next_size = stages[i + 1] if i + 1 < len(stages) else 0
        while step < n_new and np.sum(budgets > step) > next_size:
            total += size
            step += 1
    return total, step - 1


def test_compaction_stages():
    assert compaction_stages(32, enabled=True, min_batch=8) == (32, 16, 8)
    assert compaction_stages(48, enabled=True, min_batch=8) == (48, 24, 12)
    assert compaction_stages(8, enabled=True, min_batch=8) == (8,)
    assert compaction_stages(32, enabled=False, min_batch=8) == (32,)


def test_plan_prefill_dedupes_and_shares_the_common_prefix():
    head = list(range(1, 2 * PREFIX_QUANTUM + 3))  # 34 shared tokens -> 32 shared
    prompts = [head + [100], head + [101, 102], head + [100]]
    plan = plan_prefill(prompts, padded_batch=4, prompt_bucket=48, pad_id=0, mode="common")
    assert plan.num_unique == 2
    assert plan.source.tolist() == [0, 1, 0, 0]
    assert plan.prefix.tolist() == head[: 2 * PREFIX_QUANTUM]
    np.testing.assert_array_equal(plan.suffix_lengths[:2], [3, 4])
    assert plan.suffixes[1, :4].tolist() == head[32:] + [101, 102]
    assert plan.prefill_tokens == 32 + plan.suffixes.size
    identical = plan_prefill(prompts, padded_batch=4, prompt_bucket=48, pad_id=0, mode="identical")
    assert identical.prefix.size == 0 and identical.suffixes.shape[1] == 48
    none = plan_prefill(prompts, padded_batch=4, prompt_bucket=48, pad_id=0, mode="none")
    assert none.source.tolist() == [0, 1, 2, 3] and not none.copies_rows
    # A prompt that is all prefix keeps its last token for the suffix (it starts the decode).
    short = plan_prefill([head, head + [7]], padded_batch=2, prompt_bucket=48, pad_id=0,
                         mode="common")  # fmt: skip
    assert short.suffix_lengths.min() >= 1
    assert common_prefix_length([[1, 2, 3], [1, 2, 4], [1, 2]]) == 2
    with pytest.raises(ValueError, match="prefix_sharing"):
        plan_prefill(prompts, padded_batch=4, prompt_bucket=48, pad_id=0, mode="all")


def test_compaction_and_group_sharing_give_the_plain_engine_results(tiny_model):
    prompts, budgets = _group_prompts()
    config = GenerationConfig(max_new_tokens=N_NEW, temperature=1.0, top_p=0.9, eos_ids=())
    plain, plain_work = Generator(tiny_model, config.replace(**PLAIN)).generate_with_work(
        prompts, seed=5, max_new_tokens=budgets
    )
    fast, work = Generator(tiny_model, config).generate_with_work(
        prompts, seed=5, max_new_tokens=budgets
    )
    _assert_same(plain, fast, logprob_atol=2e-6)
    np.testing.assert_array_equal(plain.lengths, budgets)
    row_steps, steps = _expected_row_steps(budgets, (32, 16, 8), N_NEW)
    assert int(work.decode_row_steps) == row_steps < int(work.decode_row_steps_plain)
    assert int(work.decode_steps) == int(plain_work.decode_steps) == steps
    assert int(plain_work.decode_row_steps) == 32 * steps
    # 8 different prompts of the 32 rows are prefilled, each once.
    assert int(work.prefill_tokens) * 4 == int(work.prefill_tokens_plain)
    assert work.saved()["decode_saved"] > 0.2


def test_common_prefix_sharing_keeps_the_completions(tiny_model):
    prompts, budgets = _group_prompts(seed=1)
    config = GenerationConfig(max_new_tokens=N_NEW, temperature=0.0, eos_ids=(3, 7))
    plain = Generator(tiny_model, config.replace(**PLAIN))(prompts, max_new_tokens=budgets)
    shared, work = Generator(
        tiny_model, config.replace(prefix_sharing="common")
    ).generate_with_work(prompts, max_new_tokens=budgets)
    # The suffix reads the prefix from the cache: float32 rounding, not a different policy.
    _assert_same(plain, shared, logprob_atol=1e-5)
    assert int(work.prefill_tokens) < int(work.prefill_tokens_plain) / 4  # 16 shared tokens too


def test_eos_and_stop_sequences_survive_compaction(tiny_model):
    prompts, _ = _group_prompts(seed=2)
    config = GenerationConfig(
        max_new_tokens=N_NEW, temperature=1.0, eos_ids=(3, 7, 11), stop_sequences=((5, 9), (2,))
    )
    plain = Generator(tiny_model, config.replace(**PLAIN))(prompts, seed=9)
    fast = Generator(tiny_model, config)(prompts, seed=9)
    _assert_same(plain, fast, logprob_atol=2e-6)
    assert len(set(np.asarray(plain.finish_reason).tolist())) > 1  # rows end in different ways


@pytest.mark.parametrize("mode", ["none", "common"])
def test_continuous_batching_gives_the_plain_engine_results(tiny_model, mode):
    rng = np.random.default_rng(3)
    head = rng.integers(1, 250, size=20).tolist()
    prompts = [head + rng.integers(1, 250, size=rng.integers(3, 12)).tolist() for _ in range(50)]
    budgets = rng.integers(1, N_NEW + 1, size=50)
    config = GenerationConfig(
        max_new_tokens=N_NEW, temperature=1.0, top_k=50, eos_ids=(3, 7), stop_sequences=((5, 9),)
    )
    plain = Generator(tiny_model, config.replace(**PLAIN))(prompts, seed=4, max_new_tokens=budgets)
    continuous = ContinuousGenerator(tiny_model, config.replace(prefix_sharing=mode), num_slots=16)
    rollout, work = continuous.generate_with_work(prompts, seed=4, max_new_tokens=budgets)
    _assert_same(plain, rollout, logprob_atol=2e-6)
    # 16 slots decode the 50 rows in fewer row-steps than one padded batch of all 50.
    assert int(work.decode_row_steps) < int(work.decode_row_steps_plain)


def test_per_prompt_budgets_are_validated(tiny_model):
    gen = Generator(tiny_model, GenerationConfig(max_new_tokens=4, eos_ids=()))
    rollout = gen([[1, 2], [3, 4, 5]], max_new_tokens=[1, 3])
    assert np.asarray(rollout.lengths).tolist() == [1, 3]
    assert rollout.finish_reason_names() == ["length", "length"]
    with pytest.raises(ValueError, match="max_new_tokens per prompt must be in 1..4"):
        gen([[1, 2]], max_new_tokens=[5])
    with pytest.raises(ValueError, match="2 max_new_tokens values for 1 prompts"):
        gen([[1, 2]], max_new_tokens=[1, 2])
    with pytest.raises(ValueError, match="prefix_sharing"):
        GenerationConfig(max_new_tokens=4, prefix_sharing="some")
