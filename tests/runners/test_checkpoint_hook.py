"""The checkpoint hook keeps the run's wall time across processes in the checkpointed meta, and
the summary adds it to the last process's."""

from types import SimpleNamespace

import numpy as np

from jaxrl_llm.checkpoint import Checkpointer
from jaxrl_llm.runners import hooks
from jaxrl_llm.runners.hooks import WALL_TIME_KEY, CheckpointHook
from jaxrl_llm.runners.online import wall_time_summary


class FakeRun:
    """What the hook reads of a run: its state tree, meta and writer."""

    def __init__(self):
        self.state = {"w": np.zeros(2, np.float32)}
        self.meta, self.summary = {"step": 0}, {}
        self.writer = SimpleNamespace(rewind=lambda step: None, write_scalars=lambda *a: None)

    def state_tree(self):
        return self.state

    def load_state_tree(self, tree):
        self.state = tree


def process(directory, clock, monkeypatch, *, steps, seconds_a_step):
    """One process of a run: restore, then `steps` steps of `seconds_a_step`, each saved."""
    monkeypatch.setattr(hooks.time, "monotonic", lambda: clock[0])
    run, hook = FakeRun(), CheckpointHook(directory, every=1)
    hook.on_start(run)
    for _ in range(steps):
        clock[0] += seconds_a_step
        run.meta["step"] += 1
        hook.on_step(run, SimpleNamespace(step=run.meta["step"], skip_save=False, last=False))
    hook.close()
    return run


def test_a_resumed_run_adds_its_time_to_the_earlier_processes(tmp_path, monkeypatch):
    directory, clock = str(tmp_path / "ckpt"), [100.0]
    first = process(directory, clock, monkeypatch, steps=2, seconds_a_step=5.0)
    assert first.meta[WALL_TIME_KEY] == 10.0
    clock[0] += 1000.0  # between processes: not the run's time
    second = process(directory, clock, monkeypatch, steps=1, seconds_a_step=7.0)
    assert second.meta["step"] == 3 and second.meta[WALL_TIME_KEY] == 17.0


def test_a_checkpoint_without_the_earlier_time_leaves_it_unknown(tmp_path, monkeypatch):
    directory, clock = str(tmp_path / "ckpt"), [0.0]
    older = Checkpointer(directory)  # as written before the wall time was kept
    older.save(4, FakeRun().state, {"step": 4})
    older.close()
    run = process(directory, clock, monkeypatch, steps=1, seconds_a_step=3.0)
    assert run.meta["step"] == 5 and run.meta[WALL_TIME_KEY] is None


def test_the_summary_adds_the_earlier_time_or_says_from_which_step_it_counts():
    assert wall_time_summary(0.0, 30.0, 0) == {"wall_time_s": 30.0}
    assert wall_time_summary(17.0, 30.0, 3) == {"wall_time_s": 47.0}
    assert wall_time_summary(None, 30.0, 10) == {"wall_time_s": 30.0, "wall_time_since_step": 10}
