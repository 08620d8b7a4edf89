"""Where a gcd run's "2" answers fall: on questions whose two numbers are both even, or not.

The hack check (`jaxrl_llm.evals.hacks`) names an answer given to many questions and right on
few of them; on gcd that answer is "2", and this asks whether the policy gives it blindly or
from the numbers' parity. When both numbers are even the gcd is even (2 is its likeliest value);
when one is odd it is odd, so a "2" there is wrong whatever the numbers. Reads a run's
config.json (to rebuild its held-out questions) and eval_questions.jsonl (every evaluation's
answers), and prints one markdown row per run for its first and last evaluation:

    python experiments/gcd_parity.py runs/seeds/stabilisers/04[567]_*
"""

from __future__ import annotations

import json
import os
import sys

import ml_collections

from jaxrl_llm.rewards.extraction import find_numbers
from jaxrl_llm.runners.components import build_eval_sets


def both_even(question: str) -> bool:
    """Whether the question's two numbers (the last two integers in its text) are even."""
    first, second = (int(n) for n in find_numbers(question)[-2:])
    return first % 2 == 0 and second % 2 == 0


def parity_row(evaluation: dict, even: list[bool]) -> dict[str, float]:
    """Counts of one evaluation's "2" answers by the parity of their questions."""
    said_two = [answer == "2" for answer in evaluation["answers"]]
    n_even = sum(even)
    return {
        "step": evaluation["step"],
        "accuracy": sum(evaluation["correct"]) / len(even),
        "two_on_even": sum(s and e for s, e in zip(said_two, even, strict=True)),
        "two_on_odd": sum(s and not e for s, e in zip(said_two, even, strict=True)),
        "right_on_odd": sum(c and not e for c, e in zip(evaluation["correct"], even, strict=True)),
        "n_even": n_even,
        "n_odd": len(even) - n_even,
    }


def held_out_line(references: list[str], even: list[bool]) -> str:
    """What the held-out set itself offers a parity guess."""
    two_is_gcd = sum(r == "2" and e for r, e in zip(references, even, strict=True))
    parity_rule = sum(
        (e and r == "2") or (not e and r == "1") for r, e in zip(references, even, strict=True)
    )
    return (
        f"Of the {sum(even)} both-even questions the gcd is 2 on {two_is_gcd}; the parity rule "
        f"(2 when both are even, else 1) would score {100 * parity_rule / len(even):.1f}%."
    )


def main(run_dirs: list[str]) -> None:
    print(
        '| run | step | held-out accuracy | "2" on both-even questions | "2" on the others '
        "(always wrong) | right on the others |\n| --- | ---: | ---: | ---: | ---: | ---: |"
    )
    held_out_lines = set()  # one per distinct held-out set among the runs
    for run_dir in run_dirs:
        with open(os.path.join(run_dir, "config.json")) as f:
            config = ml_collections.ConfigDict(json.load(f))
        if config.task.name != "gcd":
            raise SystemExit(f"{run_dir}: task.name={config.task.name!r}, not gcd")
        (eval_set,) = build_eval_sets(config, names=["gcd"])
        even = [both_even(example.question) for example in eval_set.examples]
        with open(os.path.join(run_dir, "eval_questions.jsonl")) as f:
            evaluations = [json.loads(line) for line in f if line.strip()]
        references = [str(example.answer) for example in eval_set.examples]
        kept = evaluations[-1].get("references")  # older records kept no references
        if len(evaluations[-1]["answers"]) != len(references) or kept not in (None, references):
            raise SystemExit(f"{run_dir}: its held-out questions differ from the config's rebuild")
        for evaluation in (evaluations[0], evaluations[-1]):
            row = parity_row(evaluation, even)
            print(
                f"| {os.path.basename(run_dir)[:3]} | {row['step']} | {100 * row['accuracy']:.1f}% "
                f"| {row['two_on_even']} / {row['n_even']} | {row['two_on_odd']} / {row['n_odd']} "
                f"| {row['right_on_odd']} / {row['n_odd']} |"
            )
        held_out_lines.add(held_out_line(references, even))
    print("", *sorted(held_out_lines), sep="\n")


if __name__ == "__main__":
    main(sys.argv[1:])
