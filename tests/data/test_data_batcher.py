"""PromptBatcher: per-epoch permutations from (seed, epoch), and exact resumption from `position`."""

import itertools

import numpy as np
import pytest

from jaxrl_llm.data import Example, PromptBatcher, ReasoningGymSource


def hand_source(n):
    return [Example(question=f"q{i}", answer=str(i), source="hand", index=i) for i in range(n)]


def indices(batch):
    return [e.index for e in batch]


def test_unshuffled_batches_walk_the_source_and_wrap():
    batcher = PromptBatcher(hand_source(5), batch_size=2, seed=0, shuffle=False)
    batches = [indices(next(batcher)) for _ in range(4)]
    # The third batch takes its second example from epoch 1.
    assert batches == [[0, 1], [2, 3], [4, 0], [1, 2]]
    assert batcher.state() == {"position": 8}
    assert batcher.epoch == 1


def test_each_epoch_is_a_permutation_from_seed_and_epoch():
    n = 7
    batcher = PromptBatcher(hand_source(n), batch_size=7, seed=3)
    epoch0, epoch1 = indices(next(batcher)), indices(next(batcher))
    assert sorted(epoch0) == sorted(epoch1) == list(range(n))
    assert epoch0 == np.random.default_rng([3, 0]).permutation(n).tolist()
    assert epoch1 == np.random.default_rng([3, 1]).permutation(n).tolist()
    assert epoch0 != epoch1
    other = PromptBatcher(hand_source(n), batch_size=7, seed=4)
    assert indices(next(other)) != epoch0


def test_batch_larger_than_source_spans_epochs():
    batcher = PromptBatcher(hand_source(2), batch_size=5, seed=0, shuffle=False)
    assert indices(next(batcher)) == [0, 1, 0, 1, 0]
    assert batcher.state() == {"position": 5}


def test_resume_gives_the_same_batches_as_an_uninterrupted_run():
    source = ReasoningGymSource("chain_sum", seed=0, size=10, max_terms=2, max_digits=2)
    uninterrupted = PromptBatcher(source, batch_size=4, seed=11)
    expected = [next(uninterrupted) for _ in range(8)]  # spans 3 epochs and 2 epoch boundaries

    first = PromptBatcher(source, batch_size=4, seed=11)
    seen = [next(first) for _ in range(3)]
    state = first.state()
    assert state == {"position": 12}
    resumed = PromptBatcher(source, batch_size=4, seed=11)
    resumed.restore(state)
    rest = list(itertools.islice(resumed, 5))
    assert seen + rest == expected
    assert [e.question for b in rest for e in b] == [e.question for b in expected[3:] for e in b]


def test_restore_accepts_numpy_scalars_and_rejects_bad_state():
    batcher = PromptBatcher(hand_source(3), batch_size=1, seed=0, shuffle=False)
    batcher.restore({"position": np.int64(4)})
    assert indices(next(batcher)) == [1]
    with pytest.raises(ValueError, match="expected"):
        batcher.restore({"position": 1, "epoch": 0})
    with pytest.raises(ValueError, match="must be >= 0"):
        batcher.restore({"position": -1})


def test_batcher_argument_errors():
    with pytest.raises(ValueError, match="empty"):
        PromptBatcher([], batch_size=1, seed=0)
    with pytest.raises(ValueError, match="batch_size=0"):
        PromptBatcher(hand_source(2), batch_size=0, seed=0)
