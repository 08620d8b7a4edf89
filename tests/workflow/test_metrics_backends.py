"""What `MetricsWriter` writes, read back by the viewers' own readers: TensorBoard's
`EventAccumulator` (the `tensorboard` extra) and a wandb offline run's files (the `wandb` extra)."""

import glob
import json
import os
import struct
import time

import pytest

from jaxrl_llm.config import config_for
from jaxrl_llm.metrics import MetricsWriter, read_metrics
from jaxrl_llm.metrics_wandb import RUN_ID_FILE, validate_metrics_section

SCALARS = {1: {"reward": 0.25, "loss": -1.5}, 2: {"reward": 0.75, "loss": 0.125}}
SAMPLES = [{"prompt": "2+2?", "completion": "4", "reward": 1.0}, {"prompt": "3+4?", "reward": 0}]


def _write(writer: MetricsWriter) -> None:
    for step, scalars in SCALARS.items():
        writer.write_scalars(step, scalars)
    writer.write_samples(2, SAMPLES)
    writer.close()


def test_tensorboard_reads_back_the_scalars(tmp_path):
    """TensorBoard's own reader gets every scalar at its step, and the samples as text."""
    pytest.importorskip("tensorboard", reason="the `tensorboard` extra is not installed")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    _write(MetricsWriter(str(tmp_path)))
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    assert sorted(events.Tags()["scalars"]) == ["loss", "reward"]
    for key in ("loss", "reward"):
        read = {e.step: e.value for e in events.Scalars(key)}
        assert read == {step: scalars[key] for step, scalars in SCALARS.items()}
    [text] = events.Tensors("samples/text_summary")
    assert text.step == 2
    assert b"**reward 1.0**" in text.tensor_proto.string_val[0]


def _wandb_records(path: str) -> list[bytes]:
    """The records of a `.wandb` file: a 7-byte header (":W&B", magic, version), then LevelDB's
    log format (32 KiB blocks; each chunk: crc32 (4), length (2), type (1: whole, 2-4: first,
    middle, last piece of a record))."""
    data = open(path, "rb").read()
    assert data[:4] == b":W&B"
    block, pos, records, pending = 32768, 7, [], b""
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a header is padding
            pos += block - pos % block
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if kind == 0 or pos + 7 + length > len(data):  # the end, or a chunk still being written
            break
        pending += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):
            records.append(pending)
            pending = b""
    return records


def _wandb_history(run_dir: str, timeout_s: float = 30.0) -> dict[int, dict]:
    """{step: logged values} of an offline run, once its file holds the run's exit record
    (wandb's service process may still be writing the file when `finish` returns)."""
    from google.protobuf.message import DecodeError
    from wandb.proto import wandb_internal_pb2

    [path] = glob.glob(os.path.join(run_dir, "run-*.wandb"))
    deadline = time.time() + timeout_s
    while True:
        try:
            records = [wandb_internal_pb2.Record.FromString(d) for d in _wandb_records(path)]
        except DecodeError:  # a record caught half-written: read the file again
            if time.time() > deadline:
                raise
            records = []
        kinds = [r.WhichOneof("record_type") for r in records]
        if "exit" in kinds or time.time() > deadline:
            break
        time.sleep(0.2)
    history = {}
    for record, kind in zip(records, kinds, strict=True):
        if kind == "history":
            history[record.history.step.num] = {
                i.key or "/".join(i.nested_key): json.loads(i.value_json)
                for i in record.history.item
            }
    return history


def test_wandb_offline_run_holds_the_scalars_and_samples(tmp_path, monkeypatch):
    """`config.metrics.wandb=True` in offline mode: the run files under `workdir/wandb` hold every
    scalar at its step and the samples table; no network is asked."""
    pytest.importorskip("wandb", reason="the `wandb` extra is not installed")
    for key in ("WANDB_MODE", "WANDB_DIR", "WANDB_PROJECT", "WANDB_RUN_ID"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "config"))
    config = config_for("grpo")
    config.metrics.wandb = True
    workdir = tmp_path / "run"
    os.makedirs(workdir)
    _write(MetricsWriter.for_run(config, str(workdir)))
    assert len(read_metrics(str(workdir))) == 2  # the JSONL files as without wandb
    [run_dir] = glob.glob(str(workdir / "wandb" / "offline-run-*"))
    run_id = (workdir / RUN_ID_FILE).read_text().strip()
    assert run_dir.endswith(run_id)
    history = _wandb_history(run_dir)
    for step, scalars in SCALARS.items():
        assert {k: history[step][k] for k in scalars} == scalars
    assert history[2]["samples/nrows"] == 2
    [table] = glob.glob(os.path.join(run_dir, "files", "media", "table", "samples_2_*.json"))
    table = json.load(open(table))
    assert table["columns"] == ["prompt", "completion", "reward"]
    assert table["data"] == [["2+2?", "4", 1.0], ["3+4?", None, 0]]


def test_metrics_section_defaults_and_errors():
    """TensorBoard on and wandb off by default; a bad mode names the field."""
    config = config_for("grpo")
    assert (config.metrics.tensorboard, config.metrics.wandb) == (True, False)
    config.metrics.wandb = True
    config.metrics.wandb_mode = "cloud"
    with pytest.raises(ValueError, match=r"config.metrics.wandb_mode='cloud' must be one of"):
        validate_metrics_section(config)


def test_for_run_without_wandb_or_tensorboard(tmp_path):
    """`tensorboard=False` writes no event files; a config without a `metrics` section (written
    before it existed) gets TensorBoard."""
    config = config_for("grpo")
    config.metrics.tensorboard = False
    MetricsWriter.for_run(config, str(tmp_path / "a")).close()
    assert not os.path.exists(tmp_path / "a" / "tensorboard")
    config = config_for("grpo")
    config.unlock()
    del config["metrics"]
    MetricsWriter.for_run(config, str(tmp_path / "b")).close()
    assert os.path.isdir(tmp_path / "b" / "tensorboard")
