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
With --out PATH it writes them to PATH instead, under the date and the command that made them
(docs/reports/prm_refinement_negative_results.md).
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import shlex
import sys

import numpy as np

from jaxrl_llm.evals.hacks import is_negative_number
from jaxrl_llm.evals.intervals import percentile_interval, seeds_questions_interval
from jaxrl_llm.metrics import read_eval_rows
from jaxrl_llm.rewards.refinement import split_steps

_STEP_RESULT = re.compile(r"(?:=|answer is)\s*(-?\d+)\s*\.?\s*$")
WHY = (
    "Why: the Math-Shepherd labels the PRM learned from are the SFT policy's Monte Carlo success "
    "rate from each step, and that policy fails far more often once a partial result is "
    "negative, so the PRM can pay a policy for avoiding negative numbers. Seeds < 3 are sketches."
)


def label_by_sign(steps_path: str):
    """(mean label of steps whose result is < 0, of the others, their counts, and the
    Interval of the difference) over the PRM stage's steps.jsonl records."""
    sums_c2, counts_c2 = [], []  # per completion: [steps with a negative result, the others]
    with open(steps_path) as f:
        for line in f:
            record = json.loads(line)
            text = record["completion"]
            spans = split_steps(text)  # the PRM stage's steps, one label each
            if len(spans) != len(record["labels"]):
                raise ValueError(
                    f"{steps_path}: a record has {len(spans)} steps and "
                    f"{len(record['labels'])} labels; pass the steps.jsonl of the PRM stage."
                )
            sums, counts = [0.0, 0.0], [0, 0]
            for (start, end), label in zip(spans, record["labels"], strict=True):
                match = _STEP_RESULT.search(text[start:end])
                if match:
                    side = 0 if is_negative_number(match.group(1)) else 1
                    sums[side] += label
                    counts[side] += 1
            sums_c2.append(sums)
            counts_c2.append(counts)
    sums_c2, counts_c2 = np.asarray(sums_c2), np.asarray(counts_c2)
    neg_mean, pos_mean = sums_c2.sum(0) / counts_c2.sum(0)
    # Cluster bootstrap (Davison & Hinkley 1997, section 3.8): draw whole completions, so the
    # steps of one completion move together, and take the two ratios of sums in each draw.
    rng = np.random.default_rng(0)
    drawn_bc = rng.integers(0, len(counts_c2), size=(4000, len(counts_c2)))
    means_b2 = sums_c2[drawn_bc].sum(1) / np.maximum(counts_c2[drawn_bc].sum(1), 1)
    diff = percentile_interval(float(neg_mean - pos_mean), means_b2[:, 0] - means_b2[:, 1], 0.95)
    neg_n, pos_n = counts_c2.sum(0)
    return neg_mean, pos_mean, int(neg_n), int(pos_n), diff


def _evals(trial_dir: str) -> list[dict]:
    """The trial's held-out evaluations in step order (`read_eval_rows`: a step evaluated
    twice by a resumed run keeps its last line)."""
    rows = read_eval_rows(trial_dir)
    return [rows[key] for key in sorted(rows)]


def _fmt(interval) -> str:
    return f"{100 * interval.mean:.1f} [{100 * interval.low:.1f}, {100 * interval.high:.1f}]"


def group_rows(label: str, dirs: list[str]) -> list[str]:
    """Markdown rows of one group at its first and last evaluation."""
    per_seed = [_evals(d) for d in dirs]
    rows = []
    for which, name in ((0, "first"), (-1, "last")):
        records = [evals[which] for evals in per_seed]
        references = records[0]["references"]
        negative_ref = np.array([is_negative_number(r) for r in references])
        answers_sq = np.array(
            [[is_negative_number(a) for a in r["answers"]] for r in records], float
        )
        correct_sq = np.array([r["correct"] for r in records], float)
        rows.append(
            f"| {label} | {name} (step {', '.join(str(r['step']) for r in records)}) "
            f"| {_fmt(seeds_questions_interval(answers_sq))} "
            f"| {_fmt(seeds_questions_interval(correct_sq[:, negative_ref]))} "
            f"| {_fmt(seeds_questions_interval(correct_sq[:, ~negative_ref]))} |"
        )
    return rows


def tables(steps_path: str, groups: list[tuple[str, list[str]]]) -> list[str]:
    """The two markdown tables (module docstring), line by line."""
    neg_mean, pos_mean, neg_n, pos_n, diff = label_by_sign(steps_path)
    lines = [
        "| steps | count | mean Math-Shepherd label |",
        "| --- | --- | --- |",
        f"| result < 0 | {neg_n} | {neg_mean:.3f} |",
        f"| result >= 0 | {pos_n} | {pos_mean:.3f} |",
        f"| difference | | {diff.mean:+.3f} [{diff.low:+.3f}, {diff.high:+.3f}] "
        "(completions resampled) |",
        "",
        "| group | held-out eval | negative answers % | accuracy %, reference < 0 "
        "| accuracy %, reference >= 0 |",
        "| --- | --- | --- | --- | --- |",
    ]
    for label, dirs in groups:
        lines.extend(group_rows(label, dirs))
    return lines


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", required=True, help="the PRM stage's steps.jsonl")
    parser.add_argument("--out", default="", help="write the tables to this markdown file")
    parser.add_argument("groups", nargs="+", help="LABEL=DIR[,DIR...] (one directory per seed)")
    args = parser.parse_args(argv)
    groups = []
    for spec in args.groups:
        label, sep, dirs = spec.partition("=")
        if not sep or not dirs:
            parser.error(f"group {spec!r}: write LABEL=DIR[,DIR...]")
        groups.append((label, dirs.split(",")))

    lines = tables(args.steps, groups)
    if not args.out:
        print("\n".join(lines))
        return
    command = "python experiments/negative_results_report.py " + shlex.join(
        list(argv if argv is not None else sys.argv[1:])
    )
    header = [f"Generated {datetime.date.today()} by", "", "```", command, "```", "", WHY, ""]
    with open(args.out, "w") as f:
        f.write("\n".join(header + lines) + "\n")
    print(f"[negative_results_report] wrote {args.out}")


if __name__ == "__main__":
    main()
