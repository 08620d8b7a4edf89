"""Two local processes (gloo CPU collectives) form one 8-device mesh and train a step together.

Run as a script, this file is one worker: `python test_multiprocess.py PROCESS_ID NUM_PROCESSES
PORT` joins the run, trains, and prints one `RESULT {json}` line.
"""

import functools
import json
import math
import os
import socket
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from jaxrl_llm import distributed
from jaxrl_llm.models import tiny_config
from jaxrl_llm.sharding import (
    DECODE_RULES,
    TRAIN_RULES,
    init_optimizer_state,
    init_sharded,
    logical_to_sharding,
    make_mesh,
    optimizer_state_shardings,
    param_shardings,
    reshard,
)

CONFIG = tiny_config(
    vocab_size=128, hidden_size=32, intermediate_size=64, num_layers=1, num_heads=4, num_kv_heads=2
)
BATCH, LENGTH = 4, 9
DEVICES_PER_PROCESS = 4
TIMEOUT_S = 300
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _read(x: jax.Array) -> float:
    """A replicated scalar as seen by this process (its first local replica)."""
    return float(np.asarray(x.addressable_data(0)))


def train_two_steps(mesh) -> dict:
    """Losses of two AdamW steps on a fixed batch, with TRAIN_RULES (FSDP x TP) over `mesh`.

    The loss is the mean next-token cross-entropy of the tiny Transformer. Every process builds
    the same global batch and feeds only its addressable shards.
    """
    model = init_sharded(CONFIG, mesh, TRAIN_RULES, seed=0)
    graphdef, params = nnx.split(model)
    shardings = param_shardings(params, mesh, TRAIN_RULES)
    tx = optax.adamw(1e-2)
    opt_state = init_optimizer_state(tx, params, shardings)
    opt_shardings = optimizer_state_shardings(tx, params, shardings)
    replicated = NamedSharding(mesh, P())

    tokens_host = np.random.default_rng(0).integers(0, CONFIG.vocab_size, (BATCH, LENGTH))
    tokens_host = tokens_host.astype(np.int32)
    token_sharding = logical_to_sharding(("batch", "sequence"), TRAIN_RULES, mesh, (BATCH, LENGTH))
    tokens = jax.make_array_from_callback(
        tokens_host.shape, token_sharding, lambda index: tokens_host[index]
    )

    def loss_fn(params, tokens_bt):
        logits_btv = nnx.merge(graphdef, params)(tokens_bt[:, :-1]).astype(jnp.float32)
        logp_btv = jax.nn.log_softmax(logits_btv, axis=-1)
        targets_bt = tokens_bt[:, 1:]
        return -jnp.mean(jnp.take_along_axis(logp_btv, targets_bt[..., None], axis=-1))

    @functools.partial(
        jax.jit, donate_argnums=(0, 1), out_shardings=(shardings, opt_shardings, replicated)
    )
    def step(params, opt_state, tokens_bt):
        loss, grads = jax.value_and_grad(loss_fn)(params, tokens_bt)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    params, opt_state, loss0 = step(params, opt_state, tokens)
    params, opt_state, loss1 = step(params, opt_state, tokens)
    checksum = jax.jit(
        lambda p: sum(jnp.sum(jnp.abs(x)) for x in jax.tree.leaves(p)), out_shardings=replicated
    )
    before = _read(checksum(params))
    q_proj = params["layers"][0]["attention"]["q_proj"].get_value()
    result = {
        "losses": [_read(loss0), _read(loss1)],
        "checksum": before,
        "q_proj_spec": str(q_proj.sharding.spec),
        "q_proj_local_shards": len(q_proj.addressable_shards),
    }
    # Train -> decode -> train across the processes' devices (one device set: jitted moves).
    params, _ = reshard(params, param_shardings(params, mesh, DECODE_RULES), donate=True)
    q_proj = params["layers"][0]["attention"]["q_proj"].get_value()
    result["decode_q_proj_spec"] = str(q_proj.sharding.spec)
    params, _ = reshard(params, shardings, donate=True)
    result["round_trip_checksum"] = _read(checksum(params))
    return result


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker_env() -> dict:
    env = dict(os.environ)
    # One process = one host with 4 CPU devices (set through jax_num_cpu_devices below).
    flags = [f for f in env.get("XLA_FLAGS", "").split() if "host_platform_device_count" not in f]
    env["XLA_FLAGS"] = " ".join(flags)
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [REPO, env.get("PYTHONPATH")]))
    return env


def test_two_processes_form_one_mesh_and_agree_on_the_loss():
    port = _free_port()
    procs = [
        subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), str(i), "2", str(port)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=_worker_env(),
            cwd=REPO,
            text=True,
        )
        for i in range(2)
    ]
    # The same program on this process's 8 local devices, while the workers run.
    reference = train_two_steps(make_mesh((2, 4), ("data", "model")))
    outputs = []
    try:
        for p in procs:
            outputs.append(p.communicate(timeout=TIMEOUT_S)[0])
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        tails = [p.communicate()[0][-2000:] for p in procs]
        pytest.fail(f"workers did not finish in {TIMEOUT_S} s: {tails}")
    results = []
    for p, out in zip(procs, outputs, strict=True):
        lines = [line for line in out.splitlines() if line.startswith("RESULT ")]
        assert p.returncode == 0 and len(lines) == 1, out[-3000:]
        results.append(json.loads(lines[0][len("RESULT ") :]))

    first, second = results
    assert first["process_count"] == second["process_count"] == 2
    assert first["devices"] == second["devices"] == [8, 4]
    # Both processes read the same replicated loss, parameters and layout of one global program.
    assert first["losses"] == second["losses"]
    assert first["checksum"] == second["checksum"]
    assert first["q_proj_spec"] == "P('data', 'model', None)"
    assert first["q_proj_local_shards"] == 4
    assert first["decode_q_proj_spec"] == "P(None, 'model', None)"
    assert first["round_trip_checksum"] == first["checksum"]  # same program, same bits
    loss0, loss1 = first["losses"]
    assert abs(loss0 - math.log(CONFIG.vocab_size)) < 0.05  # near-uniform predictions at init
    assert loss1 < loss0
    np.testing.assert_allclose(first["losses"], reference["losses"], rtol=1e-5)
    np.testing.assert_allclose(first["checksum"], reference["checksum"], rtol=1e-5)


def test_initialize_is_a_no_op_on_a_single_process(monkeypatch):
    for name in ("JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID", "SLURM_NTASKS"):
        monkeypatch.delenv(name, raising=False)
    assert distributed.initialize() is False
    assert distributed.initialize(num_processes=1, process_id=0) is False
    assert jax.process_count() == 1
    # Asked for a multi-process run after JAX started: JAX refuses, and says why.
    monkeypatch.setenv("JAX_COORDINATOR_ADDRESS", "127.0.0.1:1")
    with pytest.raises(RuntimeError, match="must be called before"):
        distributed.initialize(num_processes=2, process_id=0, cpu_collectives=None)


if __name__ == "__main__":
    process_id, num_processes, port = (int(a) for a in sys.argv[1:4])
    joined = distributed.initialize(
        f"127.0.0.1:{port}",
        num_processes,
        process_id,
        num_cpu_devices=DEVICES_PER_PROCESS,
        initialization_timeout=120,
    )
    assert joined
    jax.config.update("jax_default_matmul_precision", "highest")  # as tests/conftest.py does
    result = train_two_steps(make_mesh((2, 4), ("data", "model")))
    result.update(
        process_count=jax.process_count(), devices=[jax.device_count(), jax.local_device_count()]
    )
    print("RESULT " + json.dumps(result), flush=True)
