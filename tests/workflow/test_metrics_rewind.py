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


def _events(path):
    """The `Event` protos of one TensorBoard event file (TFRecord: length, its CRC, the record,
    its CRC)."""
    import struct

    from tensorboardX.proto.event_pb2 import Event

    events = []
    with open(path, "rb") as f:
        while header := f.read(12):
            (length,) = struct.unpack("<Q", header[:8])
            events.append(Event.FromString(f.read(length)))
            f.read(4)
    return events


def _visible_loss_steps(logdir):
    """The "loss" steps TensorBoard shows: read the files in name order, at a SessionLog START
    drop the events read so far at or after its step (TensorBoard's EventAccumulator purges
    so on a restart)."""
    from tensorboardX.proto.event_pb2 import SessionLog

    shown = []
    for path in sorted(logdir.iterdir()):
        for event in _events(path):
            if event.HasField("session_log") and event.session_log.status == SessionLog.START:
                shown = [s for s in shown if s < event.step]
            for value in event.summary.value:
                if value.tag == "loss":
                    shown.append(event.step)
    return shown


def test_rewind_hides_the_taken_back_steps_from_tensorboard(tmp_path):
    killed = MetricsWriter(str(tmp_path))
    _log_steps(killed, range(0, 5))
    killed.close()
    resumed = MetricsWriter(str(tmp_path))  # the same second: the purge needs its own file
    assert resumed.rewind(2) == 5
    _log_steps(resumed, range(3, 6))
    resumed.close()
    files = list((tmp_path / "tensorboard").iterdir())
    assert len(files) == 3  # the killed run's, the resumed writer's first, the purge's
    assert _visible_loss_steps(tmp_path / "tensorboard") == [0, 1, 2, 3, 4, 5]
