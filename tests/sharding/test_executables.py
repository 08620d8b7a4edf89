"""A compiled program saved and loaded back on the CPU topology; refused on other devices."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from jaxrl_llm.sharding.executables import (
    ExecutableMismatchError,
    compile_for_saving,
    executable_record,
    load_executable,
    save_executable,
)


def _compiled(num_devices: int):
    mesh = Mesh(np.asarray(jax.devices()[:num_devices]).reshape(num_devices), ("data",))
    rows = NamedSharding(mesh, PartitionSpec("data"))
    step = jax.jit(lambda w, x: (x @ w, jnp.sum(w)), out_shardings=(rows, None))
    w = jax.ShapeDtypeStruct((4, 3), jnp.float32)
    x = jax.ShapeDtypeStruct((8, 4), jnp.float32, sharding=rows)
    return step, step.lower(w, x).compile(), rows


def test_round_trip_on_the_cpu_topology(tmp_path):
    step, compiled, rows = _compiled(4)
    record = save_executable(compiled, str(tmp_path / "train"), topology="cpu-4", phase="train")
    assert record["num_devices"] == 4 and record["device_kind"] == jax.devices()[0].device_kind
    assert json.loads((tmp_path / "train.json").read_text())["phase"] == "train"
    loaded = load_executable(str(tmp_path / "train"))
    w = jnp.arange(12.0).reshape(4, 3)
    x = jax.device_put(jnp.arange(32.0).reshape(8, 4), rows)
    got, total = loaded(w, x)
    want, want_total = step(w, x)
    np.testing.assert_array_equal(got, want)
    assert float(total) == float(want_total) == 66.0


def test_an_executable_for_other_devices_is_refused(tmp_path):
    _, compiled, _ = _compiled(8)
    save_executable(compiled, str(tmp_path / "rollout"), topology="v5e-8", phase="rollout")
    with pytest.raises(
        ExecutableMismatchError, match=r"compiled for v5e-8 \(8 x .*this process has 2 x"
    ):
        load_executable(str(tmp_path / "rollout"), devices=jax.devices()[:2])
    record = json.loads((tmp_path / "rollout.json").read_text())
    record["device_kind"] = "TPU v5 lite"
    (tmp_path / "rollout.json").write_text(json.dumps(record))
    with pytest.raises(ExecutableMismatchError, match="8 x TPU v5 lite"):
        load_executable(str(tmp_path / "rollout"))
    with pytest.raises(FileNotFoundError, match="missing .*nothing.exe"):
        executable_record(str(tmp_path / "nothing"))


def _planned_run_config(tmp_path):
    from jaxrl_llm.config import config_for, make_tiny

    config = make_tiny(config_for("grpo"))
    config.placement.train_mesh = config.placement.rollout_mesh = (2, 4)
    config.train.num_steps = 1
    config.eval.before = config.eval.after = False
    return config


def _save_planned_step(config, path):
    """What `python -m jaxrl_llm.plan --save_executables` keeps, planned for this CPU's mesh."""
    from jaxrl_llm.roles import make_placement
    from jaxrl_llm.scale import workload_of
    from jaxrl_llm.scale.programs import actor_train_program

    mesh = make_placement(config.placement).train_mesh
    program = actor_train_program(workload_of(config), mesh)
    compiled = compile_for_saving(program.lowered)
    save_executable(compiled, path, topology="cpu-8", phase="actor_train")


@pytest.mark.parametrize(
    "stabilise",
    [
        {},
        # per-row entropy weights and Clip-Cov's per-token draws are batch fields the plan
        # must lay out too
        {
            "stabilise.entropy_target": 0.5,
            "loss.entropy_coef": 0.01,
            "stabilise.clip_cov_fraction": 0.05,
        },
    ],
    ids=["plain", "stabilised"],
)
def test_a_run_executes_the_planned_train_step(tmp_path, text_reward, stabilise):
    """The planner's actor_train program, saved and given to a run (`train.planned_step`), takes
    the run's own state and minibatches: the run executes the planned program, and learns as
    one that compiles its own step does."""
    from jaxrl_llm.config import apply_overrides
    from jaxrl_llm.metrics import read_metrics
    from jaxrl_llm.runners import train

    config = apply_overrides(_planned_run_config(tmp_path), stabilise)
    own = train(config, str(tmp_path / "own"), progress=False)
    assert "planned_step" not in own
    _save_planned_step(config, str(tmp_path / "plan" / "actor_train"))
    config.train.planned_step = str(tmp_path / "plan" / "actor_train")
    planned = train(config, str(tmp_path / "planned"), progress=False)
    assert planned["planned_step"] == {"updates": 2, "unplanned_shapes": []}  # 2 minibatches
    for key in ("train/loss", "train/grad_norm", "train/entropy"):
        want = [m[key] for m in read_metrics(str(tmp_path / "own"))]
        got = [m[key] for m in read_metrics(str(tmp_path / "planned"))]
        assert len(got) == 1 and all(g != 0 for g in got), (key, got)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_a_planned_step_of_another_model_or_a_missing_one_is_refused(tmp_path):
    from jaxrl_llm.config import validate_config
    from jaxrl_llm.runners import train

    config = _planned_run_config(tmp_path)
    config.train.planned_step = str(tmp_path / "none" / "actor_train")
    with pytest.raises(ValueError, match=r"config.train.planned_step=.*missing .*actor_train.exe"):
        validate_config(config)
    other = _planned_run_config(tmp_path)
    other.model.random.num_layers = 1  # another model's step
    _save_planned_step(other, str(tmp_path / "other" / "actor_train"))
    config.train.planned_step = str(tmp_path / "other" / "actor_train")
    with pytest.raises(ValueError, match=r"config.train.planned_step=.*plan with this run's"):
        train(config, str(tmp_path / "run"), progress=False)


@pytest.mark.slow  # default coverage: test_a_run_executes_the_planned_train_step (the loaded path)
def test_minibatches_the_plan_did_not_cover_compile_their_own_step(tmp_path, text_reward):
    """A step planned for 8-row minibatches given to a run of 4-row ones: the run goes on with
    its own step and says which shapes the plan missed."""
    from jaxrl_llm.runners import train

    planned = _planned_run_config(tmp_path)
    planned.train.num_minibatches = 1
    _save_planned_step(planned, str(tmp_path / "plan" / "actor_train"))
    config = _planned_run_config(tmp_path)
    config.train.planned_step = str(tmp_path / "plan" / "actor_train")
    summary = train(config, str(tmp_path / "run"), progress=False)
    assert summary["steps"] == 1 and summary["planned_step"]["updates"] == 0
    (shapes,) = summary["planned_step"]["unplanned_shapes"]
    assert [4, 72] in shapes  # the run's [rows, T] minibatch
