"""A compiled program saved and loaded back on the CPU topology; refused on other devices."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from jaxrl_llm.scale.executables import (
    ExecutableMismatchError,
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
