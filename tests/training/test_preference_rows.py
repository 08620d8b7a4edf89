"""The preference batch builders on a hand-made tokenizer: pair rows (offline stage), response rows
(RRHF's references), with their masks worked out by hand."""

import types

import numpy as np
import pytest

from jaxrl_llm.data.pairs import Pair
from jaxrl_llm.rollout.chat import response_rows
from jaxrl_llm.stages.preference import encode_pair, pair_rows

# one token per character (its code point), end of turn 1, pad 0
TOKENIZER = types.SimpleNamespace(
    encode=lambda text: [ord(c) for c in text], eos_token_id=1, pad_token_id=0
)


def test_encode_pair_is_prompt_then_completion_then_end_of_turn():
    chosen, n_chosen, rejected, n_rejected = encode_pair(TOKENIZER, Pair("ab", "c", "de"))
    assert chosen == [97, 98, 99, 1] and n_chosen == 2
    assert rejected == [97, 98, 100, 101, 1] and n_rejected == 2


def test_pair_rows_interleave_chosen_and_rejected_with_completion_masks():
    encoded = [
        encode_pair(TOKENIZER, Pair("ab", "c", "de")),
        encode_pair(TOKENIZER, Pair("x", "yz", "w")),
    ]
    ref = np.array([[-1.0, -2.0], [-3.0, -4.0]])
    rows = pair_rows(encoded, ref, np.array([1.0, 0.0]), width=6, pad_id=0)
    np.testing.assert_array_equal(
        rows.tokens,
        [
            [97, 98, 99, 1, 0, 0],  # pair 0 chosen
            [97, 98, 100, 101, 1, 0],  # pair 0 rejected
            [120, 121, 122, 1, 0, 0],  # pair 1 chosen
            [120, 119, 1, 0, 0, 0],  # pair 1 rejected
        ],
    )
    np.testing.assert_array_equal(
        rows.loss_mask,
        [[0, 0, 1, 1, 0, 0], [0, 0, 1, 1, 1, 0], [0, 1, 1, 1, 0, 0], [0, 1, 1, 0, 0, 0]],
    )
    np.testing.assert_array_equal(rows.ref_logp, [-1.0, -2.0, -3.0, -4.0])
    np.testing.assert_array_equal(rows.weights, [1.0, 0.0])


def test_response_rows_follow_each_prompt_and_are_cut_to_the_budget():
    tokens, mask = response_rows(
        TOKENIZER, [[5, 6], [7]], ["ab", "cdef"], width=6, max_new_tokens=3
    )
    # "ab" + end of turn fits; "cdef" + end of turn is cut to 3 tokens (no end of turn)
    np.testing.assert_array_equal(tokens, [[5, 6, 97, 98, 1, 0], [7, 99, 100, 101, 0, 0]])
    np.testing.assert_array_equal(mask, [[0, 0, 1, 1, 1, 0], [0, 1, 1, 1, 0, 0]])
    with pytest.raises(ValueError, match="width=4"):
        response_rows(TOKENIZER, [[5, 6]], ["abc"], width=4, max_new_tokens=3)
