"""The staleness schedule and the generator/learner pipeline, without models."""

import threading
import time

import numpy as np
import pytest

from jaxrl_llm.algorithms.staleness import (
    StalenessCounter,
    behaviour_version,
    is_published,
    pending_slots,
    pending_versions,
    validate_async_section,
)
from jaxrl_llm.config import config_for
from jaxrl_llm.runners.pipeline import GeneratedBatch, Pipeline, PipelineClosed, PipelineError


@pytest.mark.parametrize("k,n", [(k, n) for k in (0, 1, 2, 4) for n in (1, 2, 3, 5) if n <= k + 1])
def test_behaviour_version_is_published_within_the_bound_and_oldest(k, n):
    for step in range(40):
        v = behaviour_version(step, k, n)
        assert is_published(v, n) and v <= step and step - v <= k
        # no older published version satisfies the bound
        assert not any(is_published(u, n) and step - u <= k for u in range(v))


def test_zero_staleness_is_the_synchronous_schedule():
    assert [behaviour_version(s, 0) for s in range(6)] == list(range(6))
    assert [behaviour_version(s, 2) for s in range(6)] == [0, 0, 0, 1, 2, 3]
    assert [behaviour_version(s, 3, 2) for s in range(7)] == [0, 0, 0, 0, 2, 2, 4]


@pytest.mark.parametrize("k,n", [(0, 1), (1, 1), (2, 1), (4, 1), (3, 2), (4, 5)])
def test_pending_versions_cover_every_untrained_batch_and_fit_the_slots(k, n):
    for learner in range(30):
        pending = pending_versions(learner, k, n)
        needed = {behaviour_version(s, k, n) for s in range(learner, learner + 50)}
        assert set(pending) == {v for v in needed if v < learner}
        assert len(pending) <= pending_slots(k, n)


def test_counter_histogram_and_bound():
    counter = StalenessCounter(max_staleness=2)
    np.testing.assert_array_equal(counter.record(5, np.array([3, 3, 4])), [2, 2, 1])
    counter.record(6, np.array([6]))
    assert counter.histogram() == {0: 1, 1: 1, 2: 2}
    with pytest.raises(RuntimeError, match="staleness 3 is outside"):
        counter.record(7, np.array([4]))
    with pytest.raises(RuntimeError, match="outside"):
        counter.record(7, np.array([8]))  # a version from the future


def test_async_config_errors_name_the_field():
    config = config_for("grpo")
    with config.unlocked():
        config.async_rl.max_staleness = 1
        config.async_rl.sync_every = 3
    with pytest.raises(ValueError, match=r"config.async_rl.sync_every=3 .*\[1, max_staleness"):
        validate_async_section(config)
    with config.unlocked():
        config.async_rl.sync_every = 1
        config.async_rl.max_staleness = -1
    with pytest.raises(ValueError, match="config.async_rl.max_staleness=-1"):
        validate_async_section(config)


def _batch(step, version):
    return GeneratedBatch(step, version, np.full(2, version), None, {}, 0.0)


def test_pipeline_hands_over_versions_and_batches_in_order():
    pipeline = Pipeline(timeout_s=5)
    pipeline.publish(0, "w0")
    pipeline.publish(1, "w1")
    assert pipeline.weights(at_least=0)[:2] == (1, "w1")  # the newest
    assert pipeline.weights(at_least=0, exact=True)[:2] == (0, "w0")
    pipeline.drop_weights_below(1)
    assert list(pipeline.published()) == [1]
    got = []

    def learner():
        for _ in range(3):
            got.append(pipeline.get()[0].step)

    thread = threading.Thread(target=learner)
    thread.start()
    for step in range(3):
        time.sleep(0.01)
        pipeline.put(_batch(step, 1))
    thread.join(5)
    assert got == [0, 1, 2]


def test_a_failed_side_wakes_the_other_with_its_error():
    pipeline = Pipeline(timeout_s=30)
    errors = []

    def learner():
        try:
            pipeline.get()
        except PipelineError as e:
            errors.append(e)

    thread = threading.Thread(target=learner)
    thread.start()
    start = time.monotonic()
    pipeline.fail("generator", ValueError("reward server down"))
    thread.join(5)
    assert time.monotonic() - start < 5
    [error] = errors
    assert "the generator failed (ValueError: reward server down)" in str(error)
    assert isinstance(error.__cause__, ValueError)


def test_a_stalled_side_times_out_naming_it():
    pipeline = Pipeline(timeout_s=0.2)
    with pytest.raises(PipelineError, match="the generator waited 0s for weight version 3"):
        pipeline.weights(at_least=3)
    with pytest.raises(PipelineError, match="the learner waited 0s for a batch from the generator"):
        pipeline.get()


def test_close_ends_waits_quietly():
    pipeline = Pipeline(timeout_s=30)
    pipeline.close()
    with pytest.raises(PipelineClosed):
        pipeline.weights(at_least=0)
    with pytest.raises(PipelineClosed):
        pipeline.put(_batch(0, 0))
