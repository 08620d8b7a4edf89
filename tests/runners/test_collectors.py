"""The online runner's parts without a model: which collector and schedule a config gets, the
sampling seeds of dynamic-sampling rounds, and collectors serving an algorithm's collection
requests (`Algorithm.collects`, built-in or registered) or refusing it by name before the model
loads."""

import dataclasses

import pytest

from jaxrl_llm.algorithms import GoldReferences, GreedyBaseline, make, register_collected
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
    with pytest.raises(ValueError, match=r"'remax' asks for GreedyBaseline\(\).*episode player"):
        EpisodePlayer(_config("remax"), remax, None, None)

    @dataclasses.dataclass(frozen=True)
    class Demonstrations:
        """A request no collector serves."""

    asking = remax._replace(collects=(Demonstrations(),))
    for collector in (SingleTurnSampler, EpisodePlayer):
        with pytest.raises(ValueError, match=r"asks for .*Demonstrations\(\).*does not collect: "):
            collector(_config("remax"), asking, None, None)
    with pytest.raises(
        ValueError, match=r"register_collected\(Demonstrations, serve, name=\.\.\.\)"
    ):
        SingleTurnSampler.check(asking)
    register_collected(Demonstrations, lambda request, context: [], name="demonstrations")
    SingleTurnSampler.check(asking)  # a registered server: both collectors serve it
    EpisodePlayer.check(asking)


def test_a_run_refuses_the_algorithm_before_its_model_loads(tmp_path, monkeypatch):
    from jaxrl_llm.runners import online

    @dataclasses.dataclass(frozen=True)
    class NoServer:
        """A request without a server."""

    def no_model(*args, **kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(online, "build_parts", no_model)
    asking = make(config_for("grpo"))._replace(collects=(NoServer(),))
    assert online.collector_type(_config()) is SingleTurnSampler
    with pytest.raises(ValueError, match=r"asks for .*NoServer\(\), which the single-turn sampler"):
        online.run_online(_config(), str(tmp_path), algorithm=asking, progress=False)


def test_the_planner_refuses_a_field_it_cannot_make():
    from jaxrl_llm.scale.programs import minibatch_of

    @dataclasses.dataclass(frozen=True)
    class PlannedField:
        """A registered request the planner's synthetic batch has nothing to serve from."""

    register_collected(PlannedField, lambda request, context: [], name="planned_field")
    asking = make(config_for("grpo"))._replace(collects=(PlannedField(),))
    with pytest.raises(ValueError, match=r"'grpo'.*collected field 'planned_field'.*grpo"):
        minibatch_of(None, asking)  # refused before the workload is read
