"""Every RL phase of a tiny model compiled ahead of time for a v5e 2x2 slice on this CPU, with
the library's own programs: memory, collectives, FSDP gathered one layer at a time, the
unembedding never gathered whole, LoRA's smaller state, the decode loop's per-step collectives
and the train -> decode reshard."""

import jax
import pytest
from flax import nnx

from jaxrl_llm.config import config_for, make_tiny
from jaxrl_llm.models import tiny_config
from jaxrl_llm.scale import (
    actor_train_program,
    analyze,
    chip,
    critic_train_program,
    critic_values_program,
    reference_program,
    reshard_programs,
    rollout_program,
    workload_of,
)
from jaxrl_llm.scale.programs import abstract_policy
from jaxrl_llm.sharding import make_mesh

MODEL = tiny_config(vocab_size=512, hidden_size=64, num_layers=3, dtype="bfloat16")


def _workload(algorithm="grpo", **overrides):
    config = make_tiny(config_for(algorithm))
    with config.unlocked():
        config.model.dtype = "bfloat16"
        config.rollout.min_prompt_bucket = 16
        config.loss.kl_beta = 0.05
        for key, value in overrides.items():
            section, field = key.split(".")
            config[section][field] = value
    return workload_of(config, MODEL)


@pytest.fixture(scope="module")
def mesh(v5e_2x2):
    return make_mesh((2, 2), ("data", "model"), devices=v5e_2x2.devices)


def test_train_step_gathers_one_layer_at_a_time(mesh):
    program = actor_train_program(_workload(), mesh)
    report = analyze(program)
    # The state the planner counts resident (bfloat16 parameters and Adam's two moments, split
    # over the 4 chips) is among what the compiled step takes per chip (with the minibatch).
    assert program.state_bytes == pytest.approx(3 * 2 * MODEL.num_params() / 4, rel=0.05)
    assert program.state_bytes <= report.argument_bytes
    assert report.code_bytes > 0  # (a tiny program's temporaries may all fit in VMEM)
    gathers = [op for op in report.collectives if op.kind == "all-gather"]
    # FSDP: the weights' all-gathers run inside the layer scan, once per layer and pass.
    assert any(op.runs == MODEL.num_layers and "while" in op.op_name for op in gathers)
    # Vocabulary-parallel log-probs: the [D, V] unembedding is never gathered whole.
    unembedding = MODEL.hidden_size * MODEL.vocab_size * 2
    assert max(op.result_bytes for op in gathers) < unembedding
    # The gradients are reduced across the data axis.
    assert any(op.kind in ("all-reduce", "reduce-scatter") for op in report.collectives)


def test_lora_trains_a_smaller_state(mesh):
    full = actor_train_program(_workload(), mesh)
    adapted = _workload()
    with adapted.config.unlocked():
        adapted.config.model.lora.rank = 4
    lora = actor_train_program(adapted, mesh)
    # Full: parameters and Adam's two moments. LoRA: the frozen base once, and the small
    # adapters with their moments.
    assert full.state_bytes / 3 < lora.state_bytes < 0.6 * full.state_bytes
    assert analyze(lora).peak_bytes > 0


def test_decode_program_sharded_cache_and_per_step_collectives(mesh):
    report = analyze(rollout_program(_workload(), mesh))
    assert report.peak_bytes >= report.argument_bytes > 0
    # The decode loop stops on data (every row finished): its collectives run per step.
    assert any(op.runs is None for op in report.collectives)
    assert report.comm_seconds(chip("v5e"), per_iteration=True) > 0


def test_reference_and_critic_forwards_compile_per_chunk(mesh):
    whole = reference_program(_workload(), mesh)
    assert whole.runs == 1 and analyze(whole).peak_bytes > 0
    chunked = reference_program(_workload(), mesh, rows=4)  # 8 rows: two chunks of 4
    assert chunked.runs == 2 and chunked.key != whole.key
    assert analyze(critic_values_program(_workload("ppo"), mesh, rows=4)).phase == "critic_values"
    assert analyze(critic_train_program(_workload("ppo"), mesh)).runs == 2  # one per minibatch


def test_reshard_same_devices_and_split_groups(v5e_2x2, mesh):
    """The weight sync as `RolloutWorker.sync` runs it: mixed precision casts the float32
    master weights first; same chips move by jitted identities (all-gathers over the FSDP
    axis); split groups send to a transport layout and copy device to device."""
    workload = _workload()
    workload = workload._replace(model=MODEL.replace(param_dtype="float32"))
    decode_mesh = make_mesh((1, 4), ("data", "model"), devices=v5e_2x2.devices)
    same = reshard_programs(workload, mesh, decode_mesh)
    phases = {p.phase for p in same.programs}
    assert phases == {"reshard_cast", "reshard"} and same.copy_bytes == 0
    reports = [analyze(p) for p in same.programs]
    assert any(op.kind == "all-gather" for r in reports for op in r.collectives)
    cast = [r for r in reports if r.phase == "reshard_cast"]
    cast_programs = [p for p in same.programs if p.phase == "reshard_cast"]
    # The cast copy: every weight in bfloat16, split over the 4 chips of the train layout (at
    # least: TPU layouts pad a tiny model's small dimensions to whole tiles).
    params = MODEL.num_params()
    weights = nnx.state(abstract_policy(workload), nnx.Param)
    assert sum(p.runs for p in cast_programs) == len(jax.tree.leaves(weights))  # every one cast
    assert sum(r.output_bytes * r.runs for r in cast) >= params * 2 / 4
    train = make_mesh((1, 2), ("data", "model"), devices=v5e_2x2.devices[:2])
    gen = make_mesh((2, 1), ("data", "model"), devices=v5e_2x2.devices[2:])
    split = reshard_programs(workload, train, gen)
    # Every weight lands whole on each generator chip (replicated decode layout).
    assert split.copy_bytes == pytest.approx(params * 2, rel=0.05)
    assert split.decode_bytes == pytest.approx(params * 2, rel=0.05)
    assert "reshard" not in {p.phase for p in split.programs}
    [analyze(p) for p in split.programs]


def test_layout_kernels_off_lowers_without_the_pallas_kernels(mesh):
    """The train step under a v5e layout lowers the Pallas log-prob kernel (a Mosaic custom
    call); under `layout_kernels(False)` it lowers none, and the compile key says which."""
    from jaxrl_llm.models.partitioning import layout_kernels

    with_kernels = actor_train_program(_workload(), mesh)
    with layout_kernels(False):
        without = actor_train_program(_workload(), mesh)
    assert "tpu_custom_call" in with_kernels.lowered.as_text()
    assert "tpu_custom_call" not in without.lowered.as_text()
    assert with_kernels.key != without.key
