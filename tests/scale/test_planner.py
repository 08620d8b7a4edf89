"""The placement search on a v5e 2x2 slice with a small model: a plan over the chip's HBM is
rejected with the compiler's figure, the rest ranked by predicted step time; the weight sync is
compiled and its memory counted per chip group; the frozen forwards' chunk is chosen like the
decode's; the command line writes the chosen placement; bad input gets one line naming it."""

import json
import os
import subprocess
import sys

import pytest

from jaxrl_llm.config import config_for, make_tiny
from jaxrl_llm.models import tiny_config
from jaxrl_llm.scale import Candidate, Searcher, divisibility_notes, workload_of
from jaxrl_llm.scale.placements import estimate_peak_bytes
from jaxrl_llm.scale.planner import refusal

# Big enough that replicated weights outweigh the code and caches of a tiny program.
MODEL = tiny_config(vocab_size=32768, hidden_size=256, intermediate_size=512, num_layers=2,
                    num_heads=4, num_kv_heads=4, dtype="bfloat16")  # fmt: skip


def _workload():
    config = make_tiny(config_for("grpo"))
    with config.unlocked():
        config.model.dtype = "bfloat16"
        config.rollout.min_prompt_bucket = 16
    return workload_of(config, MODEL)


COLOCATED_TP1 = Candidate("colocated", (2, 2), (4, 1), (0, 4), (0, 4))  # decode replicated
COLOCATED_TP4 = Candidate("colocated", (2, 2), (1, 4), (0, 4), (0, 4))


def test_over_hbm_rejected_with_the_compilers_figure(v5e_2x2):
    roomy = Searcher(_workload(), v5e_2x2, log=lambda _: None)
    replicated, split = roomy.evaluate(COLOCATED_TP1), roomy.evaluate(COLOCATED_TP4)
    assert replicated.fits and split.fits
    need_replicated = replicated.phases["rollout"].peak_bytes
    need_split = split.phases["rollout"].peak_bytes
    assert need_split < need_replicated  # the decode copy split four ways
    # A chip whose budget falls between the two: the same compiled reports, another verdict.
    budget = (need_split + need_replicated) / 2
    small = v5e_2x2._replace(chip=v5e_2x2.chip.replace(hbm_bytes=budget / 0.95))
    # prescreen=inf: every chunk is compiled, so the verdict rests on the compiler's peaks.
    tight = Searcher(_workload(), small, log=lambda _: None, prescreen=float("inf"))
    tight._reports = roomy._reports  # compiled once
    rejected, kept = tight.evaluate(COLOCATED_TP1), tight.evaluate(COLOCATED_TP4)
    assert kept.fits and not rejected.fits
    assert "rollout" in rejected.reason and "compiled peak" in rejected.reason
    smallest_chunk = tight.report("rollout", (4, 1), (0, 4), 4)
    assert f"{smallest_chunk.peak_bytes / 2**30:.2f} GiB" in rejected.reason
    assert rejected.step_seconds == float("inf")
    # With the default prescreen the same verdict may come without compiling, from a lower
    # bound that must never exceed what the compiler reported.
    screened = Searcher(_workload(), small, log=lambda _: None)
    screened._reports = roomy._reports
    assert not screened.evaluate(COLOCATED_TP1).fits and screened.evaluate(COLOCATED_TP4).fits
    bound = estimate_peak_bytes(_workload(), "rollout", (4, 1), 4)
    assert 0 < bound <= smallest_chunk.peak_bytes
    ranked = tight.search([COLOCATED_TP1, COLOCATED_TP4])
    assert [p.fits for p in ranked] == [True, False]


def test_decode_bytes_counted_as_the_compiled_rollout_holds_them(v5e_2x2):
    """The rollout's roofline counts, per decode step and chip, the decode layout's weights (a
    hand count: the layers and the [D, V] unembedding split over the decode mesh's "model"
    axis, bfloat16) and the KV cache of the chip's rows; the weights must be what the compiled
    rollout takes as arguments on each chip (`memory_analysis()`). A plan costed with the
    train mesh's split, or with the tied embedding counted twice, fails here; and the plan
    whose decode reads a quarter of the weights per chip ranks first."""
    searcher = Searcher(_workload(), v5e_2x2, log=lambda _: None)
    w, chip = searcher.workload, v5e_2x2.chip
    attn = 4 * 256 * 64 + 2 * 4 * 256 * 64 + 4 * 64 * 256  # Q, K, V, O of 4 heads of 64
    weights = (2 * (attn + 3 * 256 * 512) + 256 * 32768) * 2  # 2 layers + unembedding, bf16
    slots = w.prompt_len + w.response_len - 1  # head_dim 64: the XLA path reads every slot
    cache_per_row = slots * 2 * 2 * 4 * 64 * 2  # K and V, 2 layers, 4 KV heads of 64, bf16
    plans = searcher.search([COLOCATED_TP1, COLOCATED_TP4])
    assert [p.candidate[:3] for p in plans] == [COLOCATED_TP4[:3], COLOCATED_TP1[:3]]
    for plan in plans:
        data, model = plan.candidate.rollout_mesh
        rows = (plan.candidate.decode_batch or w.sequences) / data
        rollout = plan.phases["rollout"]
        counted = rollout.roofline.memory_s * chip.hbm_bandwidth  # one decode step
        assert counted == pytest.approx(weights / model + rows * cache_per_row / model, rel=1e-6)
        compiled = rollout.report.argument_bytes  # the weights, the prompts and a key
        assert weights / model <= compiled < 1.05 * weights / model


def test_the_weight_sync_is_compiled_with_the_plan(v5e_2x2):
    """Colocated, mixed precision: the sync casts the float32 master weights (a bfloat16 copy
    in the train layout) and moves them into the decode layout with collectives (XLA picks
    all-to-alls and permutes for FSDP x TP -> TP over 4 chips); its peak holds the
    learner's state, the cast copy and the decode copy at once, and its time comes from the
    compiled programs."""
    workload = _workload()._replace(model=MODEL.replace(param_dtype="float32"))
    searcher = Searcher(workload, v5e_2x2, log=lambda _: None)
    plan = searcher.evaluate(COLOCATED_TP4)
    assert plan.fits and "reshard_receive" not in plan.phases  # one chip group
    sync = plan.phases["reshard"]
    report = sync.report
    assert report.phase == "reshard" and report.compile_seconds >= 0
    assert report.collectives and report.compiler_bytes > 0
    params = MODEL.num_params()
    # The learner keeps float32 master weights and two float32 moments, over 4 chips: the
    # counted state and the compiled train step's arguments (`memory_analysis()`) hold them.
    actor = searcher.state_bytes("actor_train", (2, 2), (0, 4))
    assert actor == pytest.approx(12 * params / 4, rel=0.01)
    assert actor <= plan.phases["actor_train"].report.argument_bytes < 1.1 * actor
    decode_copy = searcher.state_bytes("rollout", (1, 4), (0, 4))
    assert decode_copy == pytest.approx(2 * params / 4, rel=0.01)  # bfloat16, TP over 4
    cast_copy = params * 2 / 4  # bfloat16, FSDP x TP over 4 chips
    assert report.output_bytes == pytest.approx(cast_copy + decode_copy, rel=0.05)
    # kept to the sync's end: the learner's state, the cast copy and the decode copy
    kept = actor + cast_copy + decode_copy
    assert kept < sync.peak_bytes < kept + report.temp_bytes + report.code_bytes + 0.5 * actor
    # HBM traffic: each cast reads 4 and writes 2 bytes per weight, each move reads and writes
    # 2 (the compiled arguments and outputs of every program, times its runs)
    assert sync.roofline.memory_s * v5e_2x2.chip.hbm_bandwidth == pytest.approx(
        (6 + 4) * params / 4, rel=0.05
    )
    assert sync.roofline.comm_s > 0


def test_a_split_sync_counts_each_chip_group_on_its_own(v5e_2x2):
    """Split 2 + 2, the decode layout replicated: the learner's chips hold the actor's state and
    one array in flight, the generator's the decode copy; neither holds the other's bytes."""
    model = tiny_config(vocab_size=1024, hidden_size=256, intermediate_size=1024, num_layers=4,
                        num_heads=4, num_kv_heads=4, dtype="bfloat16")  # fmt: skip
    workload = _workload()._replace(model=model)  # no array above a quarter of the weights
    searcher = Searcher(workload, v5e_2x2, log=lambda _: None)
    plan = searcher.evaluate(Candidate("split", (1, 2), (2, 1), (0, 2), (2, 2)))
    assert plan.fits, plan.reason
    actor = searcher.state_bytes("actor_train", (1, 2), (0, 2))
    decode_copy = searcher.state_bytes("rollout", (2, 1), (2, 2))  # every weight, whole
    learner, generator = plan.phases["reshard"], plan.phases["reshard_receive"]
    assert actor <= learner.peak_bytes < actor + 0.5 * decode_copy
    assert decode_copy <= generator.peak_bytes < decode_copy + 0.5 * actor
    # the copy between the groups: every weight whole (bfloat16) onto each generator chip,
    # over one torus dimension's ICI
    copy_s = model.num_params() * 2 / v5e_2x2.chip.collective_bandwidth(1)
    assert generator.roofline.comm_s == pytest.approx(copy_s, rel=0.05)


def _ppo_workload():
    """PPO with 256 rows of 120 tokens a step and a train step of 4 rows: the reference's and
    the critic's forwards over the whole step take more memory than any other phase. (120, not
    128: the splash kernel, which tiles 128, refuses the tests' "highest" matmul precision.)"""
    config = make_tiny(config_for("ppo"))
    with config.unlocked():
        config.model.dtype = "bfloat16"
        config.rollout.num_prompts = 64
        config.rollout.min_prompt_bucket = 104
        config.rollout.max_new_tokens = 16
        config.train.num_minibatches = 64
        config.rollout.compaction = False  # one decode loop to compile, not one per stage
    return workload_of(config, MODEL)


# Slow: compiles the PPO workload's phases for v5e-4 (default coverage of the chunked forwards:
# test_aot.py::test_reference_and_critic_forwards_compile_per_chunk).
@pytest.mark.slow
def test_the_forward_chunk_is_chosen_like_the_decode_chunk(v5e_2x2):
    roomy = Searcher(_ppo_workload(), v5e_2x2, log=lambda _: None)
    whole = roomy.evaluate(COLOCATED_TP4)
    assert whole.fits and whole.candidate.forward_batch == 0
    assert whole.phases["reference"].report.runs == 1
    assert "--config.rollout.forward_batch=0" in whole.overrides()
    # A chip whose budget falls between the reference's need at 256 and at 128 rows.
    need_all = whole.phases["reference"].peak_bytes
    half = roomy.report("reference", (2, 2), (0, 4), 128)
    need_half = need_all - whole.phases["reference"].report.peak_bytes + half.peak_bytes
    others = [p.peak_bytes for k, p in whole.phases.items()
              if k not in ("reference", "critic_values", "rollout")]  # fmt: skip
    budget = (need_all + need_half) / 2
    assert need_half < budget < need_all and max(others) < budget
    small = v5e_2x2._replace(chip=v5e_2x2.chip.replace(hbm_bytes=budget / 0.95))
    tight = Searcher(_ppo_workload(), small, log=lambda _: None, prescreen=float("inf"))
    tight._reports = roomy._reports  # compiled once
    plan = tight.evaluate(COLOCATED_TP4)
    assert plan.fits, plan.reason
    assert plan.candidate.forward_batch == 128 and "(forwards 128 rows)" in plan.candidate.label()
    assert plan.phases["reference"].report.runs == plan.phases["critic_values"].report.runs == 2
    assert plan.phases["reference"].peak_bytes == pytest.approx(need_half)
    assert "--config.rollout.forward_batch=128" in plan.overrides()


def test_mesh_larger_than_the_topology(v5e_2x2):
    searcher = Searcher(_workload(), v5e_2x2, log=lambda _: None)
    with pytest.raises(ValueError, match="does not fit v5e-4 \\(4 chips\\)"):
        searcher.mesh((4, 4), (0, 16))


def test_dimensions_that_do_not_divide_are_named():
    notes = divisibility_notes(tiny_config(num_heads=6, num_kv_heads=3, hidden_size=96),
                               (2, 4), (1, 4))  # fmt: skip
    assert any("num_heads=6 does not divide over train model=4" in n for n in notes)
    assert any("num_kv_heads=3" in n and "[1]" in n for n in notes)
    assert not divisibility_notes(MODEL, (2, 2), (1, 4))


def _plan(*args, tmp_path):
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env.pop("XLA_FLAGS", None)
    config = [] if "--config" in args else ["--config", "experiments/configs/grpo_tiny.py"]
    return subprocess.run(
        [sys.executable, "-m", "jaxrl_llm.plan", *config,
         f"--cache_dir={tmp_path / 'cache'}", *args],
        capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip


def test_command_line_writes_the_chosen_placement_and_keeps_its_executables(v5e_2x2, tmp_path):
    from jaxrl_llm.sharding.executables import ExecutableMismatchError, load_executable

    out = _plan("--topology", "v5e-4", "--modes", "colocated", "--tensor_parallel", "2",
                "--out", str(tmp_path / "plan"), "--save_executables", tmp_path=tmp_path)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert "| 1 | colocated 2x2 / 2x2 |" in out.stdout
    assert "--config.placement.train_mesh=(2,2)" in out.stdout
    placement = json.load(open(tmp_path / "plan" / "placement.json"))
    assert placement == {"mode": "colocated", "train_mesh": [2, 2], "rollout_mesh": [2, 2]}
    plan_md = (tmp_path / "plan" / "plan.md").read_text()
    assert "the compiler's** are the memory columns" in plan_md  # each figure's source named
    assert "**Counted**" in plan_md and "a floor, not a measurement" in plan_md
    overrides = json.load(open(tmp_path / "plan" / "overrides.json"))
    assert overrides["rollout.decode_batch"] == 0
    assert "rollout.forward_batch" not in overrides  # GRPO without KL: no frozen forward
    # The rerun reads every compiled report from the cache.
    again = _plan("--topology", "v5e-4", "--modes", "colocated", "--tensor_parallel", "2",
                  tmp_path=tmp_path)  # fmt: skip
    assert again.returncode == 0 and "(cached)" in again.stdout and " s)" not in again.stdout
    # The chosen plan's compiled programs are kept with their topology (--save_executables).
    directory = tmp_path / "plan" / "executables"
    assert "# saved the actor_train, rollout executables for v5e-4" in out.stdout
    for phase in ("actor_train", "rollout"):
        record = json.load(open(directory / f"{phase}.json"))
        assert record["topology"] == "v5e-4" and record["num_devices"] == 4
        assert record["device_kind"] == "TPU v5 lite" and record["bytes"] > 0
        with pytest.raises(
            ExecutableMismatchError, match="compiled for v5e-4 \\(4 x TPU v5 lite\\)"
        ):
            load_executable(str(directory / phase))  # this CPU is not the slice
    # So are the weight sync's per-array programs, each with the arrays it serves.
    syncs = json.load(open(directory / "weight_sync.json"))
    assert f"and the weight sync's {len(syncs)} programs in" in out.stdout
    assert syncs and sum(s["runs"] for s in syncs) >= len(syncs)
    for entry in syncs:
        assert entry["phase"] in ("reshard_cast", "reshard", "reshard_send", "reshard_receive")
        record = json.load(open(directory / f"{entry['file']}.json"))
        assert record["phase"] == entry["phase"] and record["num_devices"] == 4
        assert "NamedSharding" in entry["source"] and "NamedSharding" in entry["target"]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--topology", "v5e-3"], "Unknown TPU topology 'v5e-3'"),
        (
            [
                "--topology",
                "v5e-4",
                "--placement",
                "colocated",
                "--train_mesh",
                "4,4",
                "--rollout_mesh",
                "4,4",
            ],
            "needs 16 chips",
        ),  # fmt: skip
        (
            [
                "--topology",
                "v5e-4",
                "--placement",
                "split",
                "--train_mesh",
                "2",
                "--rollout_mesh",
                "1,2",
            ],
            "--train_mesh must be two positive ints",
        ),  # fmt: skip
        (
            [
                "--config",
                "experiments/configs/ppo_llama8b_pod.py",
                "--topology",
                "v5e-64",
                "--config.rollout.forward_batch=3",
            ],
            "config.rollout.forward_batch=3 must divide the 1024 rows of a step",
        ),  # fmt: skip
    ],
)
def test_bad_input_is_one_line(v5e_2x2, tmp_path, args, message):
    out = _plan(*args, tmp_path=tmp_path)
    assert out.returncode == 2
    assert message in out.stderr and "Traceback" not in out.stderr


def test_a_refusal_for_a_partial_slice_is_explained():
    """v5e compiles only over a whole slice (measured: an 8B train step on 32 of a v5e-64's
    chips); the reason says so instead of quoting the RET_CHECK."""
    from jaxrl_llm.scale import chip

    error = RuntimeError(
        "INTERNAL: RET_CHECK failure (deepsea_compiler_base.cc:1879) device_count == ... On "
        "platforms with limited ICI routing device assignment should include all slice devices"
    )
    reason = refusal(error, chip("v5e"))
    assert "v5e" in reason and "split placement needs one slice per group" in reason
    assert refusal(ValueError("other"), chip("v5e")) == "the compiler refused it: other"


def test_predictions_follow_the_attention_kernel_the_programs_run(v5e_2x2):
    """On TPU layouts the train step runs splash attention at lengths it tiles, so the roofline
    counts no [T, T] score traffic there; `layout_kernels(False)` turns it off."""
    from jaxrl_llm.models.partitioning import layout_kernels

    config = make_tiny(config_for("grpo"))
    with config.unlocked():
        config.rollout.min_prompt_bucket = 96
        config.rollout.max_new_tokens = 32  # 128 tokens: the kernel's tile
    searcher = Searcher(workload_of(config, MODEL), v5e_2x2, log=lambda _: None)
    assert searcher.workload.length % 128 == 0 and searcher.attention_kernel()
    with layout_kernels(False):
        assert not searcher.attention_kernel()
        assert searcher.logprob_implementation() == "xla"
    assert searcher.logprob_implementation() == "pallas_tpu"
    assert not Searcher(_workload(), v5e_2x2, log=lambda _: None).attention_kernel()  # < 128


def test_a_mesh_axis_across_physical_axes_is_split_not_refused(v5e_2x2):
    """8 x 8 on v5p-128's 4 x 4 x 4 torus: no logical axis is a product of physical ones, so
    `sharding.make_mesh` splits a physical axis (the search used to stop here with
    NotImplementedError, and a run could not have built the mesh the planner chose)."""
    from jaxrl_llm.scale import get_topology

    del v5e_2x2  # only for its libtpu check
    searcher = Searcher(_workload(), get_topology("v5p-128"), log=lambda _: None)
    mesh = searcher.mesh((8, 8), (0, 64))
    assert dict(mesh.shape) == {"data": 8, "model": 8}
    assert sorted(d.id for d in mesh.devices.flat) == list(range(64))
