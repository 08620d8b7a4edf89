"""The online runner's parts without a model: which collector and schedule a config gets, the
sampling seeds of dynamic-sampling rounds, and collectors serving an algorithm's collection
requests (`Algorithm.collects`) or refusing it by name."""

import dataclasses

import pytest

from jaxrl_llm.algorithms import GoldReferences, GreedyBaseline, make
from jaxrl_llm.config import config_for, make_tiny
from jaxrl_llm.runners import AsyncSchedule, EpisodePlayer, SingleTurnSampler, SyncSchedule
from jaxrl_llm.runners.collectors import rollout_seed, round_seed
from jaxrl_llm.runners.online import make_schedule


def _config(algorithm="grpo", **async_rl):
    config = make_tiny(config_for(algorithm))
    with config.unlocked():
        config.async_rl.update(async_rl)
    return config


def test_the_schedule_follows_async_rl():
    assert type(make_schedule(_config())) is SyncSchedule
    schedule = make_schedule(_config(enabled=True, max_staleness=3))
    assert type(schedule) is AsyncSchedule and schedule.max_staleness == 3


def test_round_zero_is_the_steps_seed_and_later_rounds_use_unused_steps():
    config = _config()  # seed 0, 4 steps
    assert round_seed(config, 2, 0) == rollout_seed(0, 2) == 2
    assert round_seed(config, 2, 3) == rollout_seed(0, 2 + 3 * 4) == 14
    assert rollout_seed(1, 5) == 1_000_008


def test_the_algorithms_declare_what_they_need_collected():
    assert make(config_for("remax")).collects == (GreedyBaseline(),)
    assert make(config_for("grpo")).collects == ()
    rrhf = config_for("rrhf")
    rrhf.loss.reference_template = "The answer is {answer}."
    assert make(rrhf).collects == (GoldReferences("The answer is {answer}."),)


def test_a_collector_refuses_a_request_it_cannot_serve():
    remax = make(config_for("remax"))
    # (both check before they touch the run's parts or roles)
    with pytest.raises(ValueError, match=r"'remax' asks for \[GreedyBaseline\(\)\].*episodes"):
        EpisodePlayer(_config("remax"), remax, None, None)

    @dataclasses.dataclass(frozen=True)
    class Demonstrations:
        """A request no collector serves."""

    asking = remax._replace(collects=(Demonstrations(),))
    with pytest.raises(ValueError, match=r"asks for .*Demonstrations.*does not collect"):
        SingleTurnSampler(_config("remax"), asking, None, None)
