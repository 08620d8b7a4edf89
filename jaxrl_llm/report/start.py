"""`report --start_from RUN`: count a recipe's gain from the model an earlier stage started from.

A recipe with a stage before RL (Gemma 3 base: an SFT warm-up, then GRPO from the SFT policy;
docs/gemma3.md) starts its RL runs from that stage's output, so their own first evaluation
measures the warm-up's policy, not the model the recipe was given. `with_start` replaces each
run's first evaluation (step 0: accuracy, per-question correctness, answers) by another run's
step 0, for example a one-step run of the same RL config from the base model, so that the
report's "before" is the base model and its gain, still paired by question, counts the whole
recipe:

    python -m jaxrl_llm.report runs/seeds/gemma3_sft_grpo_t1 --start_from runs/gemma3_base_start
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from jaxrl_llm.report.rules import differing_keys

__all__ = ["HELD_OUT_KEYS", "held_out_of", "with_start"]

# What picks a run's held-out questions (`jaxrl_llm.data.split`, `build_eval_sets`).
HELD_OUT_KEYS = (
    "task.name",
    "task.eval_size",
    "task.eval_seed",
    "task.held_out_fraction",
    "task.selection_fraction",
    "task.split_by",
)


def held_out_of(config: dict[str, Any]) -> dict[str, Any]:
    """The entries of a flat config that pick its held-out questions."""
    return {k: v for k, v in config.items() if k in HELD_OUT_KEYS or k.startswith("task.kwargs.")}


def with_start(groups: Sequence[Any], start: Any) -> list[Any]:
    """`groups` (`report.Group`s) with every run's step-0 evaluation taken from run `start`
    (`report.Run`).

    Raises:
      ValueError: `start` kept no per-question step-0 evaluation, a run was evaluated on
        other held-out questions (the keys that differ, or the number of questions, named), or
        scored by another held-out scorer (`eval.scorer`).
    """
    if 0 not in start.correct:
        raise ValueError(
            f"--start_from {start.workdir}: no per-question evaluation at step 0 "
            "(eval_questions.jsonl); give a run that evaluated before training (eval.before)."
        )
    out = []
    for group in groups:
        runs = []
        for run in group.runs:
            if run.scorer != start.scorer:
                raise ValueError(
                    f"--start_from {start.workdir}: it was scored by eval.scorer="
                    f"{start.scorer!r} and {run.workdir} by {run.scorer!r}: two rulers; give a "
                    "start run of the same config.eval.scorer."
                )
            keys = differing_keys([held_out_of(start.config), held_out_of(run.config)])
            if keys or len(run.correct.get(0, start.correct[0])) != len(start.correct[0]):
                raise ValueError(
                    f"--start_from {start.workdir}: {run.workdir} was evaluated on other "
                    f"held-out questions ({', '.join(keys) or 'another number of questions'} "
                    "differ); give a start run of the same task and eval set."
                )
            answers = dict(run.answers)
            answers.pop(0, None)
            if 0 in start.answers:
                answers[0] = start.answers[0]
            runs.append(
                run._replace(
                    curve={**run.curve, 0: start.curve.get(0, float(start.correct[0].mean()))},
                    correct={**run.correct, 0: start.correct[0]},
                    answers=answers,
                )
            )
        out.append(group._replace(runs=runs))
    return out
