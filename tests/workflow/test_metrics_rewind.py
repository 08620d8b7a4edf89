"""`MetricsWriter.rewind`: a resumed run logs each step once and loses nothing it took back."""

import json

from jaxrl_llm.metrics import EVAL_QUESTIONS_FILE, MetricsWriter, read_metrics


def _rows(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def _log_steps(writer, steps):
    for step in steps:
        writer.write_scalars(step, {"loss": float(step)})
        writer.write_samples(step, [{"completion": f"c{step}"}])
        if step % 2 == 0:
            writer.write_eval_questions(step, {"task": [step % 4 == 0, True]})


def test_rewind_moves_rows_after_the_restored_step_and_keeps_them(tmp_path):
    killed = MetricsWriter(str(tmp_path), tensorboard=False)
    _log_steps(killed, range(0, 5))  # checkpoint at 2, killed after logging step 4
    killed.close()

    resumed = MetricsWriter(str(tmp_path), tensorboard=False)
    assert resumed.rewind(2) == 2 + 2 + 1  # metrics 3-4, samples 3-4, eval questions 4
    _log_steps(resumed, range(3, 6))
    resumed.close()

    assert [r["step"] for r in read_metrics(str(tmp_path))] == [0, 1, 2, 3, 4, 5]
    assert [r["step"] for r in _rows(tmp_path / "samples.jsonl")] == [0, 1, 2, 3, 4, 5]
    assert [r["step"] for r in _rows(tmp_path / EVAL_QUESTIONS_FILE)] == [0, 2, 4]
    superseded = _rows(tmp_path / "metrics.jsonl.superseded")
    assert superseded == [{"step": 3, "loss": 3.0}, {"step": 4, "loss": 4.0}]
    assert [r["step"] for r in _rows(tmp_path / f"{EVAL_QUESTIONS_FILE}.superseded")] == [4]


def test_rewind_with_nothing_restored_takes_back_every_row(tmp_path):
    killed = MetricsWriter(str(tmp_path), tensorboard=False)
    _log_steps(killed, range(0, 2))
    killed.close()
    resumed = MetricsWriter(str(tmp_path), tensorboard=False)
    assert resumed.rewind(-1) == 2 + 2 + 1
    resumed.close()
    assert read_metrics(str(tmp_path)) == []
    assert len(_rows(tmp_path / "samples.jsonl.superseded")) == 2


def test_rewind_at_the_last_logged_step_changes_nothing(tmp_path):
    writer = MetricsWriter(str(tmp_path), tensorboard=False)
    _log_steps(writer, range(0, 3))
    assert writer.rewind(2) == 0
    writer.write_scalars(3, {"loss": 3.0})  # the writer still appends after a rewind
    writer.close()
    assert [r["step"] for r in read_metrics(str(tmp_path))] == [0, 1, 2, 3]
    assert not (tmp_path / "metrics.jsonl.superseded").exists()
