"""Does a policy trained against the process reward model stop writing negative numbers?

    python experiments/negative_results_report.py --steps docs/reports/runs/prm_steps/prm/steps.jsonl \
        "success only=DIR,DIR" "success + raw PRM (dense)=DIR,DIR" ...

A second way to hack a PRM besides repeating steps (Gao et al., 2024, arXiv 2410.15115): the
Math-Shepherd labels (Wang et al., 2023, arXiv 2312.08935) are the rate at which the SFT policy's
Monte Carlo completions from a step reach the right answer, and that policy is far worse on
chain sums whose partial results go below zero, so a step whose result is negative gets a low
label whether or not it is right. A PRM that learns this pays the policy to avoid negative
results, and then a question whose answer is negative cannot be answered right.

Prints two markdown tables:
  1. the mean Math-Shepherd label of steps whose result is negative and of the others, and
     their difference with a 95% interval that resamples whole completions (a completion's
     steps share one prefix);
  2. per group of trial directories (one per seed, each with eval_questions.jsonl), at the
     first and the last held-out evaluation: the share of greedy answers that are negative and
     the accuracy on questions whose reference is negative and on the others, each the mean
     over seeds and questions with its 95% interval (`seeds_questions_interval`).
"""

from __future__ import annotations

import argparse
import json
import os
import re

import numpy as np

from jaxrl_llm.evals.intervals import percentile_interval, seeds_questions_interval
from jaxrl_llm.rewards.refinement import split_steps

_STEP_RESULT = re.compile(r"(?:=|answer is)\s*(-?\d+)\s*\.?\s*$")


def _is_negative(number: str | None) -> bool:
    return number is not None and str(number).strip().startswith("-")


def label_by_sign(steps_path: str):
    """(mean label of steps whose result is < 0, of the others, their counts, and the
    Interval of the difference) over the PRM stage's steps.jsonl records."""
    neg_sum, neg_n, pos_sum, pos_n = [], [], [], []
    with open(steps_path) as f:
        for line in f:
            record = json.loads(line)
            sums = {True: [0.0, 0], False: [0.0, 0]}
            text = record["completion"]
            spans = split_steps(text)  # the PRM stage's steps, one label each
            if len(spans) != len(record["labels"]):
                raise ValueError(
                    f"{steps_path}: a record has {len(spans)} steps and "
                    f"{len(record['labels'])} labels; pass the steps.jsonl of the PRM stage."
                )
            for (start, end), label in zip(spans, record["labels"], strict=True):
                match = _STEP_RESULT.search(text[start:end])
                if match:
                    cell = sums[_is_negative(match.group(1))]
                    cell[0] += label
                    cell[1] += 1
            neg_sum.append(sums[True][0])
            neg_n.append(sums[True][1])
            pos_sum.append(sums[False][0])
            pos_n.append(sums[False][1])
    neg_sum, neg_n, pos_sum, pos_n = map(np.asarray, (neg_sum, neg_n, pos_sum, pos_n))
    neg_mean, pos_mean = neg_sum.sum() / neg_n.sum(), pos_sum.sum() / pos_n.sum()
    # Cluster bootstrap (Davison & Hinkley 1997, section 3.8): draw whole completions, so the
    # steps of one completion move together, and take the two ratios of sums in each draw.
    rng = np.random.default_rng(0)
    drawn_bc = rng.integers(0, len(neg_n), size=(4000, len(neg_n)))
    replicates_b = neg_sum[drawn_bc].sum(1) / np.maximum(neg_n[drawn_bc].sum(1), 1) - pos_sum[
        drawn_bc
    ].sum(1) / np.maximum(pos_n[drawn_bc].sum(1), 1)
    diff = percentile_interval(float(neg_mean - pos_mean), replicates_b, 0.95)
    return neg_mean, pos_mean, int(neg_n.sum()), int(pos_n.sum()), diff


def _evals(trial_dir: str) -> list[dict]:
    with open(os.path.join(trial_dir, "eval_questions.jsonl")) as f:
        return sorted((json.loads(line) for line in f), key=lambda r: int(r["step"]))


def _fmt(interval) -> str:
    return f"{100 * interval.mean:.1f} [{100 * interval.low:.1f}, {100 * interval.high:.1f}]"


def group_rows(label: str, dirs: list[str]) -> list[str]:
    """Markdown rows of one group at its first and last evaluation."""
    per_seed = [_evals(d) for d in dirs]
    rows = []
    for which, name in ((0, "first"), (-1, "last")):
        records = [evals[which] for evals in per_seed]
        references = records[0]["references"]
        negative_ref = np.array([_is_negative(r) for r in references])
        answers_sq = np.array([[_is_negative(a) for a in r["answers"]] for r in records], float)
        correct_sq = np.array([r["correct"] for r in records], float)
        rows.append(
            f"| {label} | {name} (step {', '.join(str(r['step']) for r in records)}) "
            f"| {_fmt(seeds_questions_interval(answers_sq))} "
            f"| {_fmt(seeds_questions_interval(correct_sq[:, negative_ref]))} "
            f"| {_fmt(seeds_questions_interval(correct_sq[:, ~negative_ref]))} |"
        )
    return rows


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", required=True, help="the PRM stage's steps.jsonl")
    parser.add_argument("groups", nargs="+", help="LABEL=DIR[,DIR...] (one directory per seed)")
    args = parser.parse_args(argv)

    neg_mean, pos_mean, neg_n, pos_n, diff = label_by_sign(args.steps)
    print("| steps | count | mean Math-Shepherd label |")
    print("| --- | --- | --- |")
    print(f"| result < 0 | {neg_n} | {neg_mean:.3f} |")
    print(f"| result >= 0 | {pos_n} | {pos_mean:.3f} |")
    print(
        f"| difference | | {diff.mean:+.3f} [{diff.low:+.3f}, {diff.high:+.3f}] "
        "(completions resampled) |"
    )
    print()
    print(
        "| group | held-out eval | negative answers % | accuracy %, reference < 0 "
        "| accuracy %, reference >= 0 |"
    )
    print("| --- | --- | --- | --- | --- |")
    for spec in args.groups:
        label, sep, dirs = spec.partition("=")
        if not sep or not dirs:
            parser.error(f"group {spec!r}: write LABEL=DIR[,DIR...]")
        for row in group_rows(label, dirs.split(",")):
            print(row)


if __name__ == "__main__":
    main()
