"""The offline preference and self-training stages end to end on the tiny model: ReST-EM and
RAFT, offline DPO / KTO / SimPO / ORPO; each runs two steps (or iterations), resumes to repeat
the uninterrupted run, and names bad fields. Online DPO and RRHF through the online runner are in
tests/runners/test_online_preference_runs.py."""

import json
import os

import jax
import numpy as np
import pytest
from flax import nnx

from jaxrl_llm.data.pairs import Pair, write_pairs_jsonl
from jaxrl_llm.models import init_model, tiny_config
from jaxrl_llm.roles import Learner, make_placement
from jaxrl_llm.stages import load_config, run_stage
from jaxrl_llm.stages.self_training import accepted_records
from jaxrl_llm.training import make_optimizer
from tests.run_helpers import ROOT, assert_same_values, loss_rows_by_step

CONFIGS = os.path.join(ROOT, "experiments", "configs")


def _config(name, **overrides):
    return load_config(os.path.join(CONFIGS, f"{name}_tiny.py"), overrides)


def test_accepted_records_keep_distinct_accepted_completions_up_to_the_cap():
    scores = np.array([[1.0, 1.0, 0.0, 1.0], [0.0, 0.0, 0.0, 0.0]])
    records = accepted_records(
        ["q1", "q2"], [["a", "a", "b", "c"], ["d", "e", "f", "g"]], scores, threshold=1.0, most=4
    )
    assert [(r.prompt, r.response) for r in records] == [("q1", "a"), ("q1", "c")]
    capped = accepted_records(["q1"], [["a", "b", "c", "d"]], np.ones((1, 4)), threshold=1, most=1)
    assert [r.response for r in capped] == ["a"]


def test_learner_reset_restarts_from_the_given_parameters():
    model = init_model(tiny_config(), seed=0)
    mesh = make_placement(load_config(os.path.join(CONFIGS, "sft_tiny.py")).placement).train_mesh

    def loss(m, batch):
        squares = [(x**2).sum() for x in jax.tree.leaves(nnx.state(m, nnx.Param))]
        return sum(squares) * batch.sum(), {}

    learner = Learner(model, make_optimizer(learning_rate=0.1), loss, mesh)
    base = jax.tree.map(np.asarray, learner.params)
    learner.update(np.ones(1, np.float32))
    assert int(learner.state.step) == 1
    learner.reset(base)
    assert int(learner.state.step) == 0
    jax.tree.map(np.testing.assert_array_equal, jax.tree.map(np.asarray, learner.params), base)


@pytest.mark.parametrize(
    "method",
    # slow (default coverage: test_rest_em_fine_tunes_the_base_model_and_raft_continues runs
    # both methods; resuming the shared fit: test_sft_run.py::test_sft_resumes_where_it_stopped)
    [pytest.param(m, marks=pytest.mark.slow) for m in ("rest_em", "raft")],
)
def test_self_training_iterates_reports_and_resumes(tmp_path, method):
    whole = run_stage(_config(method), str(tmp_path / "a"), progress=False)
    assert [it["iteration"] for it in whole["iterations"]] == [1, 2]
    assert all(it["accepted_fraction"] == 1.0 for it in whole["iterations"])  # threshold 0
    assert os.path.isfile(tmp_path / "a" / "iteration_1" / "accepted.jsonl")
    run_stage(
        _config(method, **{"self_training.iterations": 1}), str(tmp_path / "b"), progress=False
    )
    resumed = run_stage(_config(method), str(tmp_path / "b"), progress=False)
    for i in (0, 1):
        want = loss_rows_by_step(tmp_path / "a" / f"iteration_{i}")
        got = loss_rows_by_step(tmp_path / "b" / f"iteration_{i}")
        assert_same_values(got, want, ["train/loss", "train/grad_norm"])
    assert resumed["eval_after"] == whole["eval_after"]


def test_rest_em_fine_tunes_the_base_model_and_raft_continues(tmp_path):
    """Both methods see the same first E-step; their second M-steps start from different
    weights, so the first update's loss differs, and ReST-EM's equals a fresh base model's."""
    rest = _config("rest_em", **{"self_training.iterations": 2})
    run_stage(rest, str(tmp_path / "rest"), progress=False)
    raft = _config("raft", **{"self_training.iterations": 2})
    run_stage(raft, str(tmp_path / "raft"), progress=False)
    first = {
        m: loss_rows_by_step(tmp_path / m / "iteration_0")[1]["train/loss"]
        for m in ("rest", "raft")
    }
    assert first["rest"] == pytest.approx(first["raft"], rel=1e-6)  # both start from the base
    second = {
        m: loss_rows_by_step(tmp_path / m / "iteration_1")[1]["train/loss"]
        for m in ("rest", "raft")
    }
    assert second["rest"] != pytest.approx(second["raft"], rel=1e-4)


def _pairs(path, count=40):
    """Pairs preferring a short answer to a long one: a preference a tiny model can learn."""
    pairs = []
    for i in range(count):
        prompt = f"<|im_start|>user\nQuestion {i}?<|im_end|>\n<|im_start|>assistant\n"
        pairs.append(Pair(prompt, f"The answer is {i}.", f"It might be {i + 1} or so, maybe."))
    write_pairs_jsonl(str(path), pairs)
    return str(path)


@pytest.mark.parametrize(
    "loss_type",
    # simpo and orpo runs are slow (default coverage: their losses in
    # tests/losses/test_losses_preference.py, and the sigmoid and kto runs through this stage)
    ["sigmoid", "kto", *(pytest.param(t, marks=pytest.mark.slow) for t in ("simpo", "orpo"))],
)
def test_offline_preference_learns_the_pairs(tmp_path, loss_type):
    config = _config(
        "dpo",
        **{
            "preference.pairs": _pairs(tmp_path / "pairs.jsonl"),
            "preference.loss_type": loss_type,
            "eval.before": False,
            "eval.after": False,
        },
    )
    summary = run_stage(config, str(tmp_path / "run"), progress=False)
    assert summary["pairs"]["eval_pairs"] == 8 and summary["pairs"]["train_pairs"] == 32
    assert summary["after"]["eval/reward_accuracy"] == 1.0
    assert summary["after"]["eval/loss"] < summary["before"]["eval/loss"]
    assert summary["after"]["eval/chosen_logp"] > summary["before"]["eval/chosen_logp"] - 1.0
    assert os.path.isfile(tmp_path / "run" / "model" / "config.json")
    cached = os.path.isfile(tmp_path / "run" / "reference_logps.npz")
    assert cached == (loss_type in ("sigmoid", "kto"))  # SimPO and ORPO need no reference


@pytest.mark.slow  # default coverage: test_a_corrupt_reference_cache_is_recomputed, test_sft_run.py::test_sft_resumes_where_it_stopped (the shared fit)
def test_offline_dpo_resumes_with_its_cached_reference(tmp_path):
    pairs = _pairs(tmp_path / "pairs.jsonl")
    flags = {"preference.pairs": pairs, "eval.before": False, "eval.after": False}
    run_stage(
        _config("dpo", **{"train.num_steps": 4, **flags}), str(tmp_path / "a"), progress=False
    )
    run_stage(
        _config("dpo", **{"train.num_steps": 2, **flags}), str(tmp_path / "b"), progress=False
    )
    cache = tmp_path / "b" / "reference_logps.npz"
    np.testing.assert_array_equal(
        np.load(cache)["ref_logp"], np.load(tmp_path / "a" / "reference_logps.npz")["ref_logp"]
    )
    written = os.stat(cache).st_mtime_ns
    run_stage(
        _config("dpo", **{"train.num_steps": 4, **flags}), str(tmp_path / "b"), progress=False
    )
    assert os.stat(cache).st_mtime_ns == written  # read back, not recomputed
    assert_same_values(
        loss_rows_by_step(tmp_path / "b"),
        loss_rows_by_step(tmp_path / "a"),
        ["train/loss", "train/grad_norm"],
    )


def test_a_corrupt_reference_cache_is_recomputed(tmp_path):
    flags = {"preference.pairs": _pairs(tmp_path / "pairs.jsonl"), "train.num_steps": 1}
    flags.update({"eval.before": False, "eval.after": False})
    run_stage(_config("dpo", **flags), str(tmp_path / "a"), progress=False)
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "reference_logps.npz").write_bytes(b"not a zip file")
    run_stage(_config("dpo", **flags), str(tmp_path / "b"), progress=False)
    np.testing.assert_array_equal(
        np.load(tmp_path / "b" / "reference_logps.npz")["ref_logp"],
        np.load(tmp_path / "a" / "reference_logps.npz")["ref_logp"],
    )


def test_offline_dpo_makes_pairs_from_the_policys_samples(tmp_path, text_reward):
    config = _config("dpo", **{"train.num_steps": 2, "eval.before": False, "eval.after": False})
    summary = run_stage(config, str(tmp_path), progress=False)
    lines = (tmp_path / "pairs.jsonl").read_text().splitlines()
    assert summary["pairs"]["pairs"] == len(lines) > 0
    pair = json.loads(lines[0])
    assert len(pair["chosen"]) % 2 == 1 and len(pair["rejected"]) % 2 == 0  # odd length wins


@pytest.mark.parametrize(
    "name, overrides, field",
    [
        ("dpo", {"preference.loss_type": "dpo"}, "config.preference.loss_type"),
        ("dpo", {"preference.pairs": "/nonexistent.jsonl"}, "config.preference.pairs"),
        ("dpo", {"preference.beta": 0.0}, "config.preference.beta"),
        (
            "dpo",
            {"preference.loss_type": "hinge", "preference.label_smoothing": 0.1},
            "config.preference.label_smoothing",
        ),  # fmt: skip
        ("rest_em", {"self_training.method": "rest"}, "config.self_training.method"),
        (
            "raft",
            {"self_training.samples_per_prompt": 0},
            "config.self_training.samples_per_prompt",
        ),
    ],
)
def test_a_bad_field_is_named(name, overrides, field):
    with pytest.raises(ValueError, match=field.replace(".", r"\.")):
        _config(name, **overrides)


def test_a_bad_pair_file_names_the_line_and_field(tmp_path):
    path = tmp_path / "pairs.jsonl"
    _pairs(path, count=4)
    with open(path, "a") as f:
        f.write(json.dumps({"prompt": "p", "chosen": "a", "rejected": 3}) + "\n")
    config = _config("dpo", **{"preference.pairs": str(path)})
    with pytest.raises(ValueError, match=r"pairs.jsonl:5: field 'rejected'"):
        run_stage(config, str(tmp_path / "run"), progress=False)
