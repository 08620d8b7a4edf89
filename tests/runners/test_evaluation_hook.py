"""The held-out evaluation hook: before, every N steps, after; the last step evaluated once."""

from types import SimpleNamespace

import pytest

from jaxrl_llm.runners.hooks import EvaluationHook, progress_text


class FakeRun:
    """What the hook reads of a run: evaluate(), the writer, meta and summary."""

    def __init__(self):
        self.evaluations, self.logged = 0, []
        self.meta, self.summary = {"step": 0}, {}
        self.writer = SimpleNamespace(
            write_scalars=lambda step, scalars: self.logged.append((step, scalars)),
            write_eval_questions=lambda step, correct, details: None,
        )

    def evaluate(self):
        self.evaluations += 1
        return {"accuracy": 0.1 * self.evaluations, "seconds": 1.0}


def run_steps(hook, run, steps):
    hook.on_start(run)
    for step in range(1, steps + 1):
        run.meta["step"] = step
        hook.on_step(run, SimpleNamespace(step=step))
    hook.on_end(run)


def test_the_last_step_evaluated_by_every_is_the_result_after_training():
    run = FakeRun()
    run_steps(EvaluationHook(before=True, after=True, every=2), run, 4)
    assert run.evaluations == 3  # before, step 2, step 4 (also the one after)
    assert [step for step, _ in run.logged] == [0, 2, 4]
    assert run.summary["eval_after"]["accuracy"] == pytest.approx(0.3)


def test_a_last_step_every_does_not_reach_is_evaluated_after_training():
    run = FakeRun()
    run_steps(EvaluationHook(before=False, after=True, every=2), run, 3)
    assert run.evaluations == 2  # step 2, then after step 3
    assert [step for step, _ in run.logged] == [2, 3]
    assert run.summary["eval_after"]["accuracy"] == 0.2


def test_the_progress_bar_names_its_fields_and_the_seconds_of_each_phase():
    scalars = {
        "reward/mean": 0.5,
        "reward/accuracy": 0.25,
        "train/kl_ref": 0.001,
        "train/entropy": 1.2,
        "completion/length": 45.4,
        "time/rollout_s": 25.2,
        "time/reward_s": 0.3,
        "time/train_s": 47.0,
    }
    assert progress_text(scalars) == (
        "reward 0.50 acc 0.25 kl 0.0010 ent 1.20 len 45 | rollout 25s rewards 0s train 47s"
    )
