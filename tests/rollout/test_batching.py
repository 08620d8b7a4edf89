"""Bucketing and packing of prompts, stop sequences and EOS ids (host side, exact values)."""

import numpy as np
import pytest

from jaxrl_llm.rollout import batching


def test_bucket_series():
    assert [batching.bucket_size(n) for n in (1, 2, 3, 4, 5, 7, 9, 13, 17, 33, 40, 49, 65)] == [
        1, 2, 3, 4, 6, 8, 12, 16, 24, 48, 48, 64, 96,
    ]  # fmt: skip
    assert batching.bucket_size(3, minimum=16) == 16
    with pytest.raises(ValueError):
        batching.bucket_size(-1)


def test_pack_prompts():
    packed = batching.pack_prompts([[5, 6, 7], [8]], pad_id=9, min_prompt_bucket=4)
    np.testing.assert_array_equal(packed.tokens, [[5, 6, 7, 9], [8, 9, 9, 9]])
    np.testing.assert_array_equal(packed.lengths, [3, 1])
    packed = batching.pack_prompts([[1]] * 5, pad_id=0, min_prompt_bucket=1)
    assert packed.tokens.shape == (6, 1) and packed.batch_size == 5
    np.testing.assert_array_equal(packed.active, [True] * 5 + [False])
    with pytest.raises(ValueError, match="prompt 1 is empty"):
        batching.pack_prompts([[1], []], pad_id=0)


def test_pack_stop_sequences_and_eos():
    any_, never = batching.STOP_ANY, batching.STOP_NEVER
    packed = batching.pack_stop_sequences([[4, 5], [7]])
    np.testing.assert_array_equal(
        packed,
        [
            [any_, any_, 4, 5],
            [any_, any_, any_, 7],
            [never] * 4,
            [never] * 4,
        ],
    )
    assert batching.pack_stop_sequences([]).shape == (4, 4)
    assert batching.pack_stop_sequences([[1] * 5]).shape == (4, 6)
    np.testing.assert_array_equal(batching.pack_eos_ids([2, 3]), [2, 3, -1, -1])
    with pytest.raises(ValueError):
        batching.pack_stop_sequences([[]])
