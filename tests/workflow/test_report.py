"""`python -m jaxrl_llm.report` on hand-made run directories."""

import json
import os

import numpy as np
import pytest

from jaxrl_llm import report, sweeps


def make_run(path, *, seed, task="chain_sum", lr=3e-5, before=0.2, after=0.4, steps=10,
             questions=100, finished=True, middle=None, entropy=None, sections=None,
             selection=None, truncated=None):  # fmt: skip
    """A run directory (summary.json unless not `finished`); `middle`: the held-out accuracy of
    an evaluation at steps // 2; `entropy`: (first, last) sampled entropy at steps 1 and `steps`;
    `sections`: more config sections ({"rollout": {"temperature": 1.0}}); `selection`: {step:
    accuracy} on the selection side (a run of the three-way split); `truncated`: the number of
    the last evaluation's first questions whose completion was cut."""
    os.makedirs(path, exist_ok=True)
    config = {"seed": seed, "task": {"name": task}, "optimizer": {"learning_rate": lr}}
    config.update(sections or {})
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config, f)
    rng = np.random.default_rng(seed)
    correct = {
        0: (np.arange(questions) < before * questions).astype(int),
        steps: (np.arange(questions) < after * questions).astype(int),
    }
    rng.shuffle(correct[steps])
    if middle is not None:
        correct = {0: correct[0], steps // 2: (np.arange(questions) < middle * questions).astype(int),
                   steps: correct[steps]}  # fmt: skip
    if selection is not None:
        config.setdefault("task", {})["selection_fraction"] = 0.1
        with open(os.path.join(path, "config.json"), "w") as f:
            json.dump(config, f)
    with open(os.path.join(path, "metrics.jsonl"), "w") as f:
        for step, flags in correct.items():
            f.write(json.dumps({"step": step, "eval/accuracy": float(flags.mean())}) + "\n")
        for step, accuracy in (selection or {}).items():
            f.write(json.dumps({"step": step, "eval/selection/accuracy": accuracy}) + "\n")
        for step, value in zip((1, steps), entropy or (), strict=False):
            f.write(json.dumps({"step": step, "train/entropy": value}) + "\n")
    with open(os.path.join(path, "eval_questions.jsonl"), "w") as f:
        for step, flags in correct.items():
            row = {"step": step, "set": task, "correct": flags.tolist()}
            if truncated is not None:
                row["truncated"] = (np.arange(questions) < truncated).astype(int).tolist()
            f.write(json.dumps(row) + "\n")
    if finished:
        summary = {"steps": steps, "wall_time_s": 600.0,
                   "host": {"cpu": "Test CPU", "isa": "AVX2", "cores": 2}}  # fmt: skip
        with open(os.path.join(path, "summary.json"), "w") as f:
            json.dump(summary, f)
    return str(path)


def test_groups_by_config_minus_seed(tmp_path):
    for seed in range(3):
        make_run(tmp_path / "sweep" / f"gcd_{seed}", seed=seed, task="gcd", after=0.5,
                 entropy=(0.8, 0.4 - 0.1 * seed))  # fmt: skip
        make_run(tmp_path / "sweep" / f"cs_{seed}", seed=seed, after=0.4)
    make_run(tmp_path / "sweep" / "unfinished", seed=9, finished=False)
    logged = []
    groups = report.collect_groups([str(tmp_path / "sweep")], log=logged.append)
    assert sorted(g.label for g in groups) == ["task.name=chain_sum", "task.name=gcd"]
    assert all(len(g.runs) == 3 for g in groups)
    assert any("unfinished" in line for line in logged)
    rows = {g.label: report.summarize(g, num_resamples=500) for g in groups}
    gcd = rows["task.name=gcd"]
    assert gcd["before"].mean == pytest.approx(0.2) and gcd["after"].mean == pytest.approx(0.5)
    assert gcd["gain"].mean == pytest.approx(0.3) and gcd["gain"].excludes_zero()
    assert gcd["seed_gains"] == pytest.approx([0.3] * 3) and gcd["per_question"]
    assert gcd["best"] == (pytest.approx(0.5), 10) and gcd["worst_drop"] == 0.0
    assert gcd["entropy_ratio"] == pytest.approx(0.25)  # the lowest seed's: 0.2 / 0.8
    assert rows["task.name=chain_sum"]["entropy_ratio"] is None  # not logged
    assert gcd["hosts"] == ["Test CPU (AVX2, 2 cores)"] and gcd["wall_min"] == 10.0
    text = report.markdown(list(rows.values()))
    assert "+30.0 [" in text and "Test CPU" in text and "| 0.25 |" in text


def test_mixed_explicit_group_is_refused_with_the_keys(tmp_path):
    a = make_run(tmp_path / "a", seed=0)
    b = make_run(tmp_path / "b", seed=1, lr=1e-5)
    with pytest.raises(ValueError, match="optimizer.learning_rate"):
        report.collect_groups([f"mine={a},{b}"])
    c = make_run(tmp_path / "c", seed=0)
    with pytest.raises(ValueError, match="seed 0 twice"):
        report.collect_groups([f"mine={a},{c}"])


def test_cli_bad_input_writes_nothing(tmp_path, capsys):
    run = make_run(tmp_path / "run", seed=0, finished=False)
    out = tmp_path / "out" / "report"
    assert report.main([run, "--out", str(out)]) == 2
    assert "no summary.json" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "out")
    assert report.main([str(tmp_path / "missing")]) == 2


def test_cli_writes_markdown_and_png(tmp_path):
    runs = [make_run(tmp_path / f"r{s}", seed=s) for s in range(3)]
    out = tmp_path / "docs" / "main_job"
    assert report.main([f"main={','.join(runs)}", "--out", str(out), "--resamples", "200"]) == 0
    text = (tmp_path / "docs" / "main_job.md").read_text()
    assert "| main | 0,1,2 | 20.0 [" in text and "python -m jaxrl_llm.report" in text
    assert "sketch: < 3 seeds" not in text.split("result.")[-1]
    with open(tmp_path / "docs" / "main_job.png", "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_seeds_for_the_launcher():
    assert sweeps.parse_seeds("0,1,2") == [0, 1, 2]
    assert sweeps.parse_seeds("0-2,2,5") == [0, 1, 2, 5]
    assert sweeps.with_seeds([{"task.name": "gcd"}], [0, 1]) == [
        {"task.name": "gcd", "seed": 0},
        {"task.name": "gcd", "seed": 1},
    ]
    with pytest.raises(ValueError, match="seed list is empty"):
        sweeps.with_seeds([{}], [])
    with pytest.raises(ValueError, match="--seeds .,. names no number"):
        sweeps.parse_seeds(",")
    with pytest.raises(ValueError, match="'x' is not an integer"):
        sweeps.parse_seeds("0,x")


def test_against_a_baseline_gives_the_difference_with_its_interval(tmp_path, capsys):
    base = [make_run(tmp_path / f"b{s}", seed=s, after=0.3) for s in range(3)]
    better = [make_run(tmp_path / f"w{s}", seed=s, lr=1e-5, after=0.6) for s in range(3)]
    same = [make_run(tmp_path / f"s{s}", seed=s, lr=2e-5, after=0.31) for s in range(3)]
    args = [f"base={','.join(base)}", f"better={','.join(better)}", f"same={','.join(same)}"]
    groups = report.collect_groups(args)
    rows = [report.summarize(g, num_resamples=500) for g in groups]
    diffs = dict(report.compare(rows, "base", num_resamples=500))
    assert diffs["better"].mean == pytest.approx(0.3) and diffs["better"].excludes_zero()
    assert diffs["same"].mean == pytest.approx(0.01) and not diffs["same"].excludes_zero()
    assert report.main([*args, "--against", "base", "--resamples", "200"]) == 0
    text = capsys.readouterr().out
    assert "| better | +30.0 [" in text and "| same | +1.0 [" in text and "(includes 0)" in text
    # two comparisons: each also at 97.5%, which hold together at 95%, and are wider
    assert report.family_confidence(2) == pytest.approx(0.975)
    assert "| minus base (points) | 97.5% (Bonferroni) |" in text
    wide = dict(report.compare(rows, "base", num_resamples=500, confidence=0.975))
    assert wide["better"].low < diffs["better"].low and wide["better"].excludes_zero()
    assert wide["same"].confidence == 0.975
    # another task's held-out questions cannot be paired; an unknown label is named
    other = [make_run(tmp_path / f"g{s}", seed=s, task="gcd") for s in range(3)]
    rows = [report.summarize(g, num_resamples=100)
            for g in report.collect_groups([args[0], f"gcd={','.join(other)}"])]  # fmt: skip
    with pytest.raises(ValueError, match="task.name differ"):
        report.compare(rows, "base")
    with pytest.raises(ValueError, match="no group has that label"):
        report.compare(rows, "nope")


def test_choose_applies_the_default_rule_across_tasks(tmp_path, capsys):
    """Three settings (rates) on two tasks: the highest mean gain has a seed that ends 10 points
    below its own best on gcd and does not qualify; the next qualifies and is chosen; one that
    ran on a single task does not."""
    for seed in range(3):
        for task in ("chain_sum", "gcd"):
            make_run(tmp_path / "s" / f"hi_{task}_{seed}", seed=seed, task=task, lr=1e-4,
                     after=0.6, middle=0.7 if task == "gcd" and seed == 1 else None)  # fmt: skip
            make_run(tmp_path / "s" / f"mid_{task}_{seed}", seed=seed, task=task, lr=3e-5,
                     after=0.4, middle=0.42)  # fmt: skip
        make_run(tmp_path / "s" / f"one_{seed}", seed=seed, lr=1e-5, after=0.9)
    groups = report.collect_groups([str(tmp_path / "s")], log=lambda _: None)
    rows = [report.summarize(g, num_resamples=200) for g in groups]
    settings, chosen = report.choice.choose(rows, "task.", max_drop=0.03)
    by_label = {s.label: s for s in settings}
    assert [s.label for s in settings] == [
        "optimizer.learning_rate=1e-05", "optimizer.learning_rate=0.0001",
        "optimizer.learning_rate=3e-05",
    ]  # fmt: skip
    assert by_label["optimizer.learning_rate=0.0001"].mean_gain == pytest.approx(0.4)
    assert by_label["optimizer.learning_rate=1e-05"].reasons == ["ran on 1 of the 2 tasks"]
    (reason,) = by_label["optimizer.learning_rate=0.0001"].reasons
    assert reason.startswith("task.name=gcd: a seed ends 10.0 points below its best")
    assert chosen.label == "optimizer.learning_rate=3e-05" and not chosen.reasons
    assert chosen.mean_gain == pytest.approx(0.2)  # a 2-point drop is within 3

    # A setting from an older config, without the key the others differ in, is counted apart.
    for seed in range(3):
        for task in ("chain_sum", "gcd"):
            path = make_run(
                tmp_path / "s" / f"old_{task}_{seed}", seed=seed, task=task, after=0.3, middle=0.35
            )
            config = json.load(open(os.path.join(path, "config.json")))
            del config["optimizer"]
            json.dump(config, open(os.path.join(path, "config.json"), "w"))
    groups = report.collect_groups([str(tmp_path / "s")], log=lambda _: None)
    settings, _ = report.choice.choose([report.summarize(g, num_resamples=200) for g in groups])
    assert "(1 of the keys absent from its config)" in [s.label for s in settings]

    assert report.main([str(tmp_path / "s"), "--choose_across", "task.", "--resamples", "200"]) == 0
    out = capsys.readouterr().out
    assert "Chosen: optimizer.learning_rate=3e-05." in out and "| no: ran on 1 of the 2" in out
    assert report.main([str(tmp_path / "s"), "--choose_across", "task.", "--max_drop", "1"]) == 0
    assert "Chosen: none qualifies." in capsys.readouterr().out
    # a sweep that has run one task so far names it in each setting's cell
    one_task = [row for row in rows if row["runs"][0].config["task.name"] == "chain_sum"]
    settings, _ = report.choice.choose(one_task)
    assert [task for task, _ in settings[0].rows] == ["task.name=chain_sum"]


def test_keep_records_copies_what_the_report_reads(tmp_path, capsys):
    runs = [make_run(tmp_path / "sweep" / f"{s:03d}_seed={s}", seed=s, after=0.5) for s in range(3)]
    os.makedirs(os.path.join(runs[0], "checkpoints"))  # not a record: never copied
    kept = tmp_path / "docs" / "runs"
    args = [f"online DPO={','.join(runs)}", "--resamples", "100"]
    assert report.main([*args, "--keep_records", str(kept)]) == 0
    assert "kept the records of 3 runs" in capsys.readouterr().out
    copy = kept / "online_DPO" / "000_seed=0"
    assert sorted(os.listdir(copy)) == sorted(report.loading.RECORD_FILES)
    # the copy reports the same table as the originals, and keeping again changes nothing
    assert report.main([f"online DPO={kept / 'online_DPO'}", "--resamples", "100"]) == 0
    from_copy = capsys.readouterr().out
    assert report.main(args) == 0
    assert capsys.readouterr().out.splitlines()[2:] == from_copy.splitlines()[2:]
    assert report.main([*args, "--keep_records", str(kept)]) == 0

    # a kept record that differs is refused, nothing written (not even the report)
    make_run(tmp_path / "sweep" / "001_seed=1", seed=1, after=0.7)
    out = tmp_path / "out" / "report"
    assert report.main([*args, "--keep_records", str(kept), "--out", str(out)]) == 2
    assert "001_seed=1/metrics.jsonl exists and differs" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "out")
    assert json.load(open(kept / "online_DPO" / "001_seed=1" / "config.json"))["seed"] == 1

    # a sweep's runs are kept in its own layout, and report again from the folder above
    for seed in range(2):
        make_run(tmp_path / "sw" / f"gcd_{seed}", seed=seed, task="gcd")
        make_run(tmp_path / "sw" / f"cs_{seed}", seed=seed)
    assert report.main([str(tmp_path / "sw"), "--keep_records", str(tmp_path / "k")]) == 0
    assert sorted(os.listdir(tmp_path / "k" / "sw")) == ["cs_0", "cs_1", "gcd_0", "gcd_1"]
    again = report.collect_groups([str(tmp_path / "k")])
    assert sorted(len(g.runs) for g in again) == [2, 2]


def test_hacks_column_reads_the_answers_the_writer_keeps(tmp_path, capsys):
    """Answers written by `MetricsWriter` (as the evaluation hook does) reach the report's hack
    check: the seed whose last evaluation answers a constant "2" that is mostly wrong is named,
    the others are not; runs whose evaluations kept no answers say so."""
    from jaxrl_llm.metrics import MetricsWriter, read_eval_rows

    references = ["2"] * 20 + [str(i) for i in range(3, 83)]
    for seed in range(3):
        path = make_run(tmp_path / "sweep" / f"gcd_{seed}", seed=seed, task="gcd")
        os.remove(os.path.join(path, "eval_questions.jsonl"))
        writer = MetricsWriter(path, tensorboard=False)
        final = ["2"] * 60 + references[60:] if seed == 1 else references
        for step, answers in ((0, references[:50] + [None] * 50), (10, final)):
            correct = np.asarray([a == r for a, r in zip(answers, references, strict=True)])
            details = {
                "gcd": {
                    "answers": answers,
                    "copied_input": np.zeros(100, bool),
                    "references": references,
                }
            }
            writer.write_eval_questions(step, {"gcd": correct}, details)
        writer.close()
    row = read_eval_rows(path)[(10, "gcd")]
    assert row["answers"] == row["references"] == references and row["copied_input"] == [0] * 100
    (group,) = report.collect_groups([str(tmp_path / "sweep")])
    summary = report.summarize(group, num_resamples=100)
    assert summary["hacks"][0] == summary["hacks"][2] == []
    assert summary["hacks"][1] == [
        "constant answer '2' on 60% of questions (from 20%), right on 33% of them (the "
        "reference on 20% of all)"
    ]
    assert report.main([str(tmp_path / "sweep"), "--resamples", "100"]) == 0
    assert "| seed 1: constant answer '2' on 60%" in capsys.readouterr().out
    old = [make_run(tmp_path / "old" / f"r{s}", seed=s) for s in range(3)]
    (group,) = report.collect_groups([f"old={','.join(old)}"])
    assert (
        report.tables.hacks_cell(report.summarize(group, num_resamples=100)["hacks"]) == "not kept"
    )


def test_gain_beyond_chance_does_not_count_a_constant(tmp_path, capsys):
    """letter_counting's shape: the reference is "1" on 68% of the questions; a policy that
    ends on the constant "1" gains 48 points of accuracy over a blind start that answers "10"
    on 70% of the questions, and nothing beyond chance: its kappa ends at 0 from just below 0."""
    from jaxrl_llm.evals.agreement import kappa
    from jaxrl_llm.metrics import MetricsWriter

    references = ["1"] * 68 + ["2"] * 24 + ["3"] * 8
    # "1" on 30 questions, right on 20 (of the 68 whose reference is 1), "10" elsewhere
    start = ["10"] * 48 + ["1"] * 20 + ["10"] * 22 + ["1"] * 10
    for seed in range(3):
        path = make_run(tmp_path / "sweep" / f"lc_{seed}", seed=seed, task="letter_counting")
        os.remove(os.path.join(path, "eval_questions.jsonl"))
        writer = MetricsWriter(path, tensorboard=False)
        for step, answers in ((0, start), (10, ["1"] * 100)):
            correct = np.asarray([a == r for a, r in zip(answers, references, strict=True)])
            details = {"letter_counting": {"answers": answers, "references": references,
                                           "copied_input": np.zeros(100, bool)}}  # fmt: skip
            writer.write_eval_questions(step, {"letter_counting": correct}, details)
        writer.close()
    (group,) = report.collect_groups([str(tmp_path / "sweep")])
    row = report.summarize(group, num_resamples=200)
    assert row["gain"].mean == pytest.approx(0.68 - 0.20)
    before = kappa(start, references, [a == r for a, r in zip(start, references, strict=True)])
    assert before == pytest.approx((0.20 - 0.30 * 0.68) / (1 - 0.30 * 0.68))  # just below 0
    assert row["beyond_chance"].after.mean == pytest.approx(0.0)
    assert row["beyond_chance"].gain.mean == pytest.approx(-before)
    assert report.main([str(tmp_path / "sweep"), "--resamples", "200"]) == 0
    cell = report.tables.difference_cell(row["beyond_chance"].gain)
    assert "(includes 0)" in cell and f"| {cell} |" in capsys.readouterr().out
    old = [make_run(tmp_path / "old" / f"r{s}", seed=s) for s in range(3)]
    (group,) = report.collect_groups([f"old={','.join(old)}"])
    assert report.summarize(group, num_resamples=100)["beyond_chance"] is None


@pytest.mark.parametrize(
    "hi_last, lo_last, rule, flag, reason, rule_text",
    [
        # a seed keeping 0.1 of its first entropy: under the floor
        (0.08, 0.4, {"min_entropy_ratio": 1 / 3}, ["--min_entropy_ratio", "0.333"],
         "a seed keeps 0.100 of its first sampled entropy (< 0.333)",
         "keeps at least 0.33 of its first sampled entropy"),
        # a seed ending at 2.5 times it (a blow-up): over the ceiling; exactly twice is within
        (2.0, 1.6, {"max_entropy_ratio": 2}, ["--max_entropy_ratio", "2"],
         "a seed ends at 2.500 times its first sampled entropy (> 2)", "ends at most at 2 times it"),
    ],
)  # fmt: skip
def test_choose_with_an_entropy_rule(tmp_path, capsys, hi_last, lo_last, rule, flag, reason,
                                     rule_text):  # fmt: skip
    """With --min_entropy_ratio (--max_entropy_ratio), a setting one of whose seeds ends under
    (over) that share of its first sampled entropy does not qualify, though its gain is the
    highest."""
    for seed in range(3):
        for task in ("chain_sum", "gcd"):
            make_run(tmp_path / "s" / f"hi_{task}_{seed}", seed=seed, task=task, lr=1e-4,
                     after=0.6, entropy=(0.8, hi_last if seed == 2 else 0.5))  # fmt: skip
            make_run(tmp_path / "s" / f"lo_{task}_{seed}", seed=seed, task=task, lr=3e-5,
                     after=0.4, entropy=(0.8, lo_last))  # fmt: skip
    rows = [
        report.summarize(g, num_resamples=100) for g in report.collect_groups([str(tmp_path / "s")])
    ]
    assert report.choice.choose(rows)[1].label == "optimizer.learning_rate=0.0001"
    settings, chosen = report.choice.choose(rows, **rule)
    assert chosen.label == "optimizer.learning_rate=3e-05"
    hi = next(s for s in settings if s.label == "optimizer.learning_rate=0.0001")
    assert f"task.name=gcd: {reason}" in hi.reasons
    args = [str(tmp_path / "s"), "--choose_across", "task.", "--resamples", "100"]
    assert report.main([*args, *flag]) == 0
    out = capsys.readouterr().out
    assert rule_text in out
    assert "Chosen: optimizer.learning_rate=3e-05." in out


def test_common_values_are_what_more_than_half_share():
    configs = [{"a": 1, "b": [2, 3]}, {"a": 1, "b": [2, 3]}, {"a": 2, "b": [4]}, {"b": [2, 3]}]
    assert report.choice.common_values(configs) == {"b": [2, 3]}  # a=1: 2 of 4, not a majority
    assert report.choice.common_values(configs[:3]) == {"a": 1, "b": [2, 3]}


def test_a_setting_is_labelled_by_what_it_changes(tmp_path, capsys):
    """Three settings over two keys: each label names only the keys where the setting leaves
    the values most settings share, and the table says what those are."""
    changes = {  # name: (what it changes, held-out accuracy after)
        "base": ({}, 0.7),
        "t1": ({"rollout": {"temperature": 1.0}}, 0.6),
        "kl": ({"loss": {"kl_beta": 0.04}}, 0.5),
    }
    for name, (change, after) in changes.items():
        sections = {"rollout": {"temperature": 0.7}, "loss": {"kl_beta": 0.0}, **change}
        for seed in range(3):
            make_run(tmp_path / "s" / f"{name}_{seed}", seed=seed, sections=sections, after=after)
    rows = [
        report.summarize(g, num_resamples=100) for g in report.collect_groups([str(tmp_path / "s")])
    ]
    settings, chosen = report.choice.choose(rows)
    assert [s.label for s in settings] == [
        "the common values", "rollout.temperature=1.0", "loss.kl_beta=0.04",
    ]  # fmt: skip
    assert settings[1].values == {"loss.kl_beta": 0.0, "rollout.temperature": 1.0}
    args = [str(tmp_path / "s"), "--choose_across", "task.", "--resamples", "100"]
    assert report.main(args) == 0
    out = capsys.readouterr().out
    assert "a setting has loss.kl_beta=0.0, rollout.temperature=0.7." in out
    assert "Chosen: the common values." in out


def test_a_step_that_trained_on_no_token_has_no_entropy():
    """Dynamic sampling that kept no group logs entropy 0.0 for a step with no loss token; the
    entropy ratio skips it instead of reading a collapse."""
    metrics = [
        {"step": 1, "train/entropy": 1.9, "stabilise/kept_group_fraction": 1.0},
        {"step": 29, "train/entropy": 0.7, "stabilise/kept_group_fraction": 0.5},
        {"step": 30, "train/entropy": 0.0, "stabilise/kept_group_fraction": 0.0},
    ]
    entropy = report.rules.sampled_entropy(metrics)
    assert sorted(entropy) == [1, 29]
    assert report.rules.entropy_ratio(entropy) == pytest.approx(0.7 / 1.9)


def test_a_run_on_an_accelerator_names_it_beside_the_cpu(monkeypatch):
    from jaxrl_llm import host

    assert host.accelerator_info() == {}  # the tests compute on the CPU
    cpu = {"cpu": "Intel Xeon", "isa": "AMX", "cores": 16}
    assert report.tables.host_cell({"host": cpu}) == "Intel Xeon (AMX, 16 cores)"
    on_gpu = {"host": {**cpu, "accelerator": "1 x NVIDIA H100 80GB HBM3"}}
    assert (
        report.tables.host_cell(on_gpu) == "1 x NVIDIA H100 80GB HBM3 on Intel Xeon (AMX, 16 cores)"
    )
    monkeypatch.setattr("jax.default_backend", lambda: "gpu")
    monkeypatch.setattr(
        "jax.devices", lambda: [type("Device", (), {"device_kind": "NVIDIA H100 80GB HBM3"})()]
    )
    assert host.accelerator_info() == {"accelerator": "1 x NVIDIA H100 80GB HBM3"}


def test_an_older_run_without_a_later_key_joins_its_setting(tmp_path):
    """`stabilise.entropy_min_coef` became a field after runs were recorded (their code ran with
    1e-6): an older run of the same setting is in the same group, not another setting."""
    for seed in range(3):
        stabilise = {"entropy_max_coef": 0.05}
        if seed == 2:  # recorded by the newer code
            stabilise["entropy_min_coef"] = 1e-6
        make_run(tmp_path / "s" / f"r{seed}", seed=seed, sections={"stabilise": stabilise})
    make_run(tmp_path / "s" / "floor", seed=0,
             sections={"stabilise": {"entropy_max_coef": 0.05, "entropy_min_coef": 0.005}})  # fmt: skip
    groups = report.collect_groups([str(tmp_path / "s")], log=lambda _: None)
    assert sorted(len(g.runs) for g in groups) == [1, 3]
    assert report.rules.with_added_keys({"task.name": "gcd"}) == {"task.name": "gcd"}


def test_an_older_run_without_the_resume_flag_joins_its_setting(tmp_path):
    for seed in range(3):
        train = {"num_steps": 30}
        if seed == 2:  # recorded after train.resume_with_changes became a field
            train["resume_with_changes"] = False
        make_run(tmp_path / "s" / f"r{seed}", seed=seed, sections={"train": train})
    groups = report.collect_groups([str(tmp_path / "s")], log=lambda _: None)
    assert [len(g.runs) for g in groups] == [3]


def test_an_older_run_without_clip_cov_joins_its_setting_and_clip_cov_runs_do_not(tmp_path):
    off = {"clip_cov_fraction": 0.0, "clip_cov_low": 1.0, "clip_cov_high": 5.0}
    for seed in range(3):
        stabilise = {"entropy_max_coef": 0.05}
        if seed == 2:  # recorded after Clip-Cov became a field, off
            stabilise.update(off)
        make_run(tmp_path / "s" / f"r{seed}", seed=seed, sections={"stabilise": stabilise})
    make_run(tmp_path / "s" / "cov", seed=0,
             sections={"stabilise": {"entropy_max_coef": 0.05, **off, "clip_cov_fraction": 0.02}})  # fmt: skip
    groups = report.collect_groups([str(tmp_path / "s")], log=lambda _: None)
    assert sorted(len(g.runs) for g in groups) == [1, 3]


def test_start_from_counts_the_gain_from_an_earlier_stage(tmp_path, capsys):
    # RL runs from an SFT policy (its step 0: 40%), the base model's step 0: 10%
    runs = [make_run(tmp_path / "rl" / f"r{s}", seed=s, before=0.4, after=0.5) for s in range(3)]
    base = make_run(tmp_path / "base", seed=0, before=0.1, after=0.12, steps=1,
                    sections={"model": {"name": "gemma3-270m"}})  # fmt: skip
    (own,) = [report.summarize(g, num_resamples=200) for g in report.collect_groups(runs)]
    assert own["gain"].mean == pytest.approx(0.1)
    groups = report.start.with_start(report.collect_groups(runs), report.load_run(base))
    (counted,) = [report.summarize(g, num_resamples=200) for g in groups]
    assert counted["before"].mean == pytest.approx(0.1)
    assert counted["gain"].mean == pytest.approx(0.4) and counted["gain"].excludes_zero()
    assert report.main([*runs, "--start_from", base, "--resamples", "100"]) == 0
    text = capsys.readouterr().out
    assert "| 10.0 [" in text and "Before is step 0 of" in text and "gemma3-270m" in text
    # another task's questions, or a start run that kept none, are refused naming the fix
    other = make_run(tmp_path / "gcd", seed=0, task="gcd", before=0.1, steps=1)
    with pytest.raises(ValueError, match="task.name differ.*same task and eval set"):
        report.start.with_start(report.collect_groups(runs), report.load_run(other))
    os.remove(os.path.join(base, "eval_questions.jsonl"))
    assert report.main([*runs, "--start_from", base]) == 2
    assert "no per-question evaluation at step 0" in capsys.readouterr().err


def test_runs_scored_by_two_rulers_are_compared_nowhere(tmp_path, capsys):
    """A run written before eval.scorer counts as scored by its training answer rule with cut
    completions scored: "stated" and "last_number" runs are two rulers, refused wherever the
    report would subtract one from the other, naming the field; a plain table says so."""
    stated = {"rewards": {"answer_rule": "stated"}}
    a = [make_run(tmp_path / "a" / f"r{s}", seed=s, sections=stated) for s in range(3)]
    b = [make_run(tmp_path / "b" / f"r{s}", seed=s, lr=1e-5) for s in range(3)]
    groups = [f"stable={','.join(a)}", f"plain={','.join(b)}"]
    assert report.main([*groups, "--against", "plain", "--resamples", "50"]) == 2
    err = capsys.readouterr().err
    assert "--against 'plain': the runs were scored differently (eval.scorer: " in err
    assert "stated_cut_scored" in err and "last_number" in err
    with pytest.raises(ValueError, match=r"scored by eval.scorer='last_number'.*two rulers"):
        report.start.with_start(report.collect_groups(a), report.load_run(b[0]))
    assert report.main([*a, *b, "--choose_across", "task.", "--resamples", "50"]) == 2
    assert "--choose_across: the runs were scored differently" in capsys.readouterr().err
    assert report.main([*groups, "--resamples", "50"]) == 0
    out = capsys.readouterr().out
    assert "Scorer: they differ between groups, which are then not comparable: " in out
    assert "stable: stated_cut_scored; plain: last_number" in out


def test_the_header_names_the_side_and_the_scorer(tmp_path, capsys):
    new = {"eval": {"scorer": "stated"}}
    runs = [make_run(tmp_path / f"r{s}", seed=s, sections=new, selection={0: 0.2, 10: 0.3},
                     truncated=10) for s in range(3)]  # fmt: skip
    assert report.main([*runs, "--resamples", "50"]) == 0
    out = capsys.readouterr().out
    assert "Side: test: questions that chose nothing" in out
    assert "Scorer: stated (the task's check of the stated answer; a cut completion states" in out
    # 40 right of 100 at the last step, the first 10 cut: the cut ones that are right / 40
    (row,) = [report.summarize(g, num_resamples=50) for g in report.collect_groups(runs)]
    right_and_cut = sum(
        int((r.correct[10] & r.truncated[10]).sum()) for r in row["runs"]
    )  # fmt: skip
    assert row["cut_share"] == pytest.approx(right_and_cut / 120)
    assert f"| {100 * row['cut_share']:.1f}% |" in out
    old = [make_run(tmp_path / f"o{s}", seed=s, lr=1e-5) for s in range(3)]
    assert report.main([*old, "--resamples", "50"]) == 0
    out = capsys.readouterr().out
    assert "Side: held_out: the one held-out side of runs made before" in out
    assert "Scorer: last_number (the task's check of the last number" in out
    assert "| not kept |" in out  # no truncation flags in the older records


def test_choose_reads_the_selection_side(tmp_path, capsys):
    """On the test side lr=1e-4 holds and lr=3e-5 falls 10 points; on the selection side the
    other way round: the choice follows the selection side and says so, and the table below
    still shows the test side."""
    for seed in range(3):
        for task in ("chain_sum", "gcd"):
            make_run(tmp_path / "s" / f"hi_{task}_{seed}", seed=seed, task=task, lr=1e-4,
                     after=0.6, selection={0: 0.2, 5: 0.7, 10: 0.5})  # fmt: skip
            make_run(tmp_path / "s" / f"lo_{task}_{seed}", seed=seed, task=task, lr=3e-5,
                     after=0.4, middle=0.5, selection={0: 0.2, 10: 0.3})  # fmt: skip
    assert report.main([str(tmp_path / "s"), "--choose_across", "task.", "--resamples", "50"]) == 0
    out = capsys.readouterr().out
    assert "read on the selection: the questions settings are chosen by" in out
    assert "Chosen: optimizer.learning_rate=3e-05." in out
    assert report.main([str(tmp_path / "s"), "--side", "selection", "--resamples", "50"]) == 0
    assert "Side: selection: the questions settings are chosen by" in capsys.readouterr().out


def test_a_seed_resumed_without_its_earlier_time_marks_the_wall_a_lower_bound(tmp_path):
    for seed in range(3):
        make_run(tmp_path / "whole" / f"s{seed}", seed=seed)
        make_run(tmp_path / "resumed" / f"s{seed}", seed=seed, lr=1e-5)
    with open(tmp_path / "resumed" / "s1" / "summary.json") as f:
        summary = json.load(f)
    with open(tmp_path / "resumed" / "s1" / "summary.json", "w") as f:
        json.dump({**summary, "wall_time_since_step": 10}, f)
    rows = {
        g.label: report.summarize(g, num_resamples=200)
        for g in report.collect_groups([str(tmp_path / "whole"), str(tmp_path / "resumed")])
    }
    whole, resumed = rows["optimizer.learning_rate=3e-05"], rows["optimizer.learning_rate=1e-05"]
    assert not whole["wall_partial"] and resumed["wall_partial"]
    assert report.markdown([whole]).count("≥") == 0
    text = report.markdown([whole, resumed])
    assert "| ≥ 10.0 |" in text and "Wall ≥: a seed of the group resumed" in text
