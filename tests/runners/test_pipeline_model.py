"""The discrete-event model of synchronous against asynchronous steps, on cases worked by hand."""

import pytest

from jaxrl_llm.runners.pipeline_model import (
    Phases,
    best_split,
    scaled,
    simulate_async,
    simulate_sync,
    speedup,
)


def _constant(gen, train, sync=0.0, steps=100):
    return Phases([gen] * steps, [train] * steps, sync)


def test_zero_staleness_without_scaling_is_the_synchronous_run():
    phases = Phases([3.0, 1.0, 2.0], [1.0, 2.0, 1.0], 0.5)
    timeline = simulate_async(phases, max_staleness=0, alpha_generate=0.0, alpha_train=0.0)
    assert timeline.total_s == pytest.approx(simulate_sync(phases)) == 11.5
    # the generator waits for each step's training and sync, the learner for each generation
    assert timeline.generator_idle_s == pytest.approx((1.0 + 0.5) + (2.0 + 0.5))
    assert timeline.learner_idle_s == pytest.approx(3.0 + 1.0 + 2.0)


def test_staleness_overlaps_the_phases_up_to_the_slower_one():
    # generation 2 s, training 1 s, no slowdown from the split: the learner waits for batches,
    # so 100 steps take 100 x 2 s (+ the last training step), not 100 x 3 s.
    phases = _constant(2.0, 1.0)
    for k in (1, 2, 4):
        total = simulate_async(phases, max_staleness=k, alpha_generate=0.0, alpha_train=0.0)
        assert total.total_s == pytest.approx(100 * 2.0 + 1.0)
    assert speedup(phases, max_staleness=1, alpha_generate=0.0, alpha_train=0.0) == (
        pytest.approx(300 / 201)
    )


def test_linear_scaling_gives_no_speedup_from_overlap_alone():
    phases = _constant(3.0, 1.0)
    _, best = best_split(phases, [0.25, 0.5, 0.75], max_staleness=4)
    assert best == pytest.approx(1.0, abs=0.02)  # f = 0.75: 4 s per side, as synchronous


def test_sublinear_decoding_makes_the_split_pay():
    phases = _constant(3.0, 1.0)
    fractions = [i / 20 for i in range(1, 20)]
    f, best = best_split(phases, fractions, max_staleness=4, alpha_generate=0.5)
    # f = 0.7: generation 3 / 0.7^0.5 = 3.59 s, training 1 / 0.3 = 3.33 s, against 4 s
    assert f == 0.7 and best == pytest.approx(4 / 3.59, rel=0.01)


def test_scaled_checks_the_fraction():
    assert scaled(2.0, 0.5, 1.0) == 4.0 and scaled(2.0, 0.25, 0.5) == 4.0
    with pytest.raises(ValueError, match="fraction=0"):
        scaled(1.0, 0.0, 1.0)
