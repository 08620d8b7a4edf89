"""Metrics: one writer for TensorBoard event files (tensorboardX, no TensorFlow), JSONL and,
where `config.metrics.wandb` asks, a wandb run (`jaxrl_llm.metrics_wandb`).

`metrics.jsonl` has one JSON object per step; `samples.jsonl` holds logged completions;
`eval_questions.jsonl` holds each evaluation's per-question correctness (what `jaxrl_llm.report`
resamples for its intervals) and, where the evaluator kept them, each question's id, text,
answer, reference, truncation and copied-input flags (what the report's hack check reads,
`jaxrl_llm.evals.hacks`); `eval_completions.jsonl` holds the same evaluations one line per
question, for a person to read: set, id, prompt, completion, extracted answer, reference, score.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = [
    "EVAL_COMPLETIONS_FILE",
    "EVAL_QUESTIONS_FILE",
    "MAX_ANSWER_CHARS",
    "MetricsWriter",
    "completion_rows",
    "read_eval_questions",
    "read_eval_rows",
    "read_metrics",
]


def _to_float(value: Any) -> float:
    value = float(np.asarray(value))
    return value if math.isfinite(value) else float("nan")


log = logging.getLogger(__name__)
EVAL_QUESTIONS_FILE = "eval_questions.jsonl"
EVAL_COMPLETIONS_FILE = "eval_completions.jsonl"
MAX_ANSWER_CHARS = 40  # an answer is kept to compare answers; the completion file has the text


def _flags(values: Any) -> list[int]:
    return [int(v) for v in np.asarray(values).reshape(-1)]


def _logged_after(line: str, step: int) -> bool:
    """Whether a JSONL row was logged for a step after `step` (blank lines are not)."""
    return bool(line.strip()) and int(json.loads(line)["step"]) > step


def _tensorboard_writer(logdir: str, *, purge_step: int | None = None):
    """A tensorboardX writer whose event file sorts after every earlier one of `logdir`.

    tensorboardX names the file by the time in whole seconds and opens it for writing: a
    second writer in the same second (a resumed run's purge, a fast restart) would truncate the
    first's file. The suffix (nanoseconds) makes each name new, in the order TensorBoard reads
    the files (by name).
    """
    from tensorboardX import SummaryWriter

    return SummaryWriter(logdir, purge_step=purge_step, filename_suffix=f".{time.time_ns()}")


class MetricsWriter:
    """Writes scalar metrics and text samples of a run under `workdir`.

    Args:
      workdir: the run directory; files go to `workdir/metrics.jsonl`, `workdir/samples.jsonl`
        and TensorBoard events under `workdir/tensorboard`.
      tensorboard: also write TensorBoard event files.
      wandb: also send scalars and samples to this writer (`jaxrl_llm.metrics_wandb.WandbWriter`,
        or anything with its `write_scalars`, `write_samples` and `close`).

    Example:
      writer = MetricsWriter.for_run(config, workdir)   # as `config.metrics` says
      writer.write_scalars(1, {"reward": 0.5})
    """

    def __init__(self, workdir: str, *, tensorboard: bool = True, wandb: Any = None):
        os.makedirs(workdir, exist_ok=True)
        self.workdir = workdir
        self._metrics = self._open_for_append(os.path.join(workdir, "metrics.jsonl"))
        self._samples = self._open_for_append(os.path.join(workdir, "samples.jsonl"))
        self._questions = self._open_for_append(os.path.join(workdir, EVAL_QUESTIONS_FILE))
        self._completions = self._open_for_append(os.path.join(workdir, EVAL_COMPLETIONS_FILE))
        self._tb = None
        if tensorboard:
            self._tb = _tensorboard_writer(os.path.join(workdir, "tensorboard"))
        self._wandb = wandb

    @classmethod
    def for_run(cls, config, workdir: str) -> MetricsWriter:
        """The writer `config.metrics` asks for (`jaxrl_llm.metrics_wandb.metrics_section`):
        TensorBoard unless `tensorboard=False`, wandb where `wandb=True`. A config without a
        `metrics` section (written before it existed) gets TensorBoard alone."""
        from jaxrl_llm.metrics_wandb import wandb_writer_for

        metrics = config.get("metrics")
        tensorboard = True if metrics is None else bool(metrics.tensorboard)
        return cls(workdir, tensorboard=tensorboard, wandb=wandb_writer_for(config, workdir))

    def _open_for_append(self, path: str):
        """Opens a JSONL file for appending; a torn last line (a crash mid-write) is cut off and
        kept in `<file>.torn`, so the next row starts on a line of its own."""
        if os.path.exists(path):
            with open(path, "rb") as f:
                data = f.read()
            if data and not data.endswith(b"\n"):
                cut = data.rfind(b"\n") + 1
                with open(path + ".torn", "ab") as f:
                    f.write(data[cut:] + b"\n")
                with open(path, "r+b") as f:
                    f.truncate(cut)
                log.warning("%s ended with a torn line; moved it to %s.torn", path, path)
        return open(path, "a")

    def rewind(self, step: int) -> int:
        """Takes back what a killed process logged after its last checkpoint: the rows of
        `metrics.jsonl`, `samples.jsonl`, `eval_questions.jsonl` and `eval_completions.jsonl`
        whose step is after `step`
        move to `<file>.superseded` (kept, in order), so a resumed run logs each step once.
        `step` is the restored step (-1: none restored, every row goes). TensorBoard's events
        stay in their files, hidden by a new event file that starts with a purge at `step + 1`
        (a SessionLog START, which TensorBoard reads as: drop the events from that step on).
        Returns how many rows moved."""
        moved = 0
        for attr in ("_metrics", "_samples", "_questions", "_completions"):
            handle = getattr(self, attr)
            path = handle.name
            handle.close()
            kept, later = [], []
            with open(path) as f:
                for line in f:
                    (later if _logged_after(line, step) else kept).append(line)
            if later:
                with open(path + ".superseded", "a") as f:
                    f.writelines(later)
                with open(path + ".tmp", "w") as f:
                    f.writelines(kept)
                os.replace(path + ".tmp", path)  # a kill mid-rewrite leaves the old file
                moved += len(later)
            setattr(self, attr, open(path, "a"))
        if moved:
            if self._tb is not None:
                self._tb.close()
                self._tb = _tensorboard_writer(self._tb.logdir, purge_step=step + 1)
            log.warning(
                "%s: %d rows logged after step %d moved to *.superseded", self.workdir, moved, step
            )
            if self._wandb is not None:
                log.warning(
                    "%s: wandb keeps the steps after %d it was sent and drops re-logged ones",
                    self.workdir,
                    step,
                )
        return moved

    def write_scalars(self, step: int, scalars: Mapping[str, Any]) -> dict[str, float]:
        """Appends one JSON line `{"step": step, **scalars}` and the TensorBoard scalars."""
        values = {k: _to_float(v) for k, v in scalars.items()}
        self._metrics.write(json.dumps({"step": int(step), **values}) + "\n")
        self._metrics.flush()
        if self._tb is not None:
            for key, value in values.items():
                self._tb.add_scalar(key, value, int(step))
            self._tb.flush()
        if self._wandb is not None:
            self._wandb.write_scalars(int(step), values)
        return values

    def write_samples(self, step: int, samples: list[dict[str, Any]]) -> None:
        """Appends completions (prompt, completion, reward, ...) of one step."""
        for sample in samples:
            self._samples.write(json.dumps({"step": int(step), **sample}, default=str) + "\n")
        self._samples.flush()
        if self._tb is not None and samples:
            text = "\n\n".join(
                f"**reward {s.get('reward', '')}**\n\n{s.get('completion', '')}" for s in samples
            )
            self._tb.add_text("samples", text, int(step))
        if self._wandb is not None and samples:
            self._wandb.write_samples(int(step), samples)

    def write_eval_questions(
        self,
        step: int,
        correct: Mapping[str, Any],
        details: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        """Appends one line per held-out set: `{"step", "set", "correct": [0/1 per question]}`,
        in the set's question order (the same questions at every step); with the set's
        `details` (`Evaluator.details`) also `"answers"` (each cut to `MAX_ANSWER_CHARS`, null
        for none), `"copied_input"` (0/1) and, where given, the `"ids"`, `"questions"`,
        `"references"` (cut alike) and `"truncated"` (0/1). Details with completions also go
        to `eval_completions.jsonl`, one line per question (`completion_rows`)."""
        for name, values in correct.items():
            row = {"step": int(step), "set": name, "correct": _flags(values)}
            extra = (details or {}).get(name)
            if extra is not None:
                for key in ("ids", "questions"):
                    if key in extra:
                        row[key] = [str(v) for v in extra[key]]
                row["answers"] = [
                    None if a is None else str(a)[:MAX_ANSWER_CHARS] for a in extra["answers"]
                ]
                row["copied_input"] = _flags(extra["copied_input"])
                if "references" in extra:
                    row["references"] = [str(a)[:MAX_ANSWER_CHARS] for a in extra["references"]]
                if "truncated" in extra:
                    row["truncated"] = _flags(extra["truncated"])
                for line in completion_rows(step, name, extra):
                    self._completions.write(json.dumps(line) + "\n")
            self._questions.write(json.dumps(row) + "\n")
        self._questions.flush()
        self._completions.flush()

    def close(self) -> None:
        """Flushes and closes all files."""
        self._metrics.close()
        self._samples.close()
        self._questions.close()
        self._completions.close()
        if self._tb is not None:
            self._tb.close()
        if self._wandb is not None:
            self._wandb.close()


def completion_rows(step: int, set_name: str, details: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One dict per question of an evaluation's `details` (`Evaluator.details`): step, set, id,
    prompt (the question), completion, answer (as the scorer read it; null for none), reference,
    score, truncated. Empty when the details hold no completions (an older evaluator's)."""
    if "completions" not in details:
        return []
    columns = {
        "id": details["ids"],
        "prompt": details["questions"],
        "completion": details["completions"],
        "answer": details["answers"],
        "reference": details["references"],
        "score": [float(v) for v in np.asarray(details["scores"]).reshape(-1)],
        "truncated": [bool(v) for v in np.asarray(details["truncated"]).reshape(-1)],
    }
    lengths = {key: len(values) for key, values in columns.items()}
    if len(set(lengths.values())) != 1:
        raise ValueError(f"completion_rows: details of {set_name!r} differ in length: {lengths}.")
    return [
        {"step": int(step), "set": set_name, **{key: values[i] for key, values in columns.items()}}
        for i in range(next(iter(lengths.values())))
    ]


def read_metrics(workdir: str) -> list[dict[str, float]]:
    """The rows of `workdir/metrics.jsonl`, in order (for plots, tests and notebooks)."""
    path = os.path.join(workdir, "metrics.jsonl")
    if not os.path.exists(path):
        return []
    rows = []
    with open(path) as f:
        lines = [line for line in f if line.strip()]
    for i, line in enumerate(lines):
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            if i != len(lines) - 1:
                raise
            log.warning("%s: skipping a torn last line (a crash mid-write)", path)
    return rows


def read_eval_rows(workdir: str) -> dict[tuple[int, str], dict[str, Any]]:
    """{(step, set name): the line's JSON object} of `workdir/eval_questions.jsonl`; a step
    evaluated twice (a resumed run) keeps its last line, a torn line is skipped."""
    path = os.path.join(workdir, EVAL_QUESTIONS_FILE)
    result: dict[tuple[int, str], dict[str, Any]] = {}
    if not os.path.exists(path):
        return result
    with open(path) as f:
        for line in f:
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                log.warning("%s: skipping a torn line", path)
                continue
            result[(int(row["step"]), row["set"])] = row
    return result


def read_eval_questions(workdir: str) -> dict[tuple[int, str], np.ndarray]:
    """{(step, set name): per-question correctness (0/1)} of `workdir/eval_questions.jsonl`."""
    return {k: np.asarray(row["correct"], np.int8) for k, row in read_eval_rows(workdir).items()}
