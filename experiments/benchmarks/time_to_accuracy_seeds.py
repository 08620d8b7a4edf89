"""Time to accuracy over seeds: our time over TRL's at one level, with its 95% interval.

Beside it, each race's speed whatever was learned: our training seconds a step over TRL's
(compiles included), combined the same way.

Each argument is one race's curves (`time_to_accuracy.py --out OUT` writes OUT.json), one seed
a race (`--set seed=S`), all run with the same recipe, level and machine. For every race the
ratio is our training seconds to the first held-out evaluation at or above `--level` over
TRL's. The ratios combine on the log scale: their geometric mean and a Student-t 95% interval
over the races (the spread between seeds; each race's own timing noise is inside it). A race
where a side never reached the level gives only a bound and is listed apart, not averaged.

    python experiments/benchmarks/time_to_accuracy_seeds.py --level 0.18 \\
        race_s0.json race_s1.json race_s2.json

A race may join several files with "+": each side is read from the first file that has it. So
our warm-cache side (a second run with `--skip-trl`) races the TRL side of the first run:

    python experiments/benchmarks/time_to_accuracy_seeds.py --level 0.18 \\
        race_s0_warm.json+race_s0_cold.json race_s1_warm.json+race_s1_cold.json ...
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Sequence

from scipy import stats

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from time_to_accuracy import SYSTEMS, Curve  # noqa: E402


def load_race(paths: str) -> dict[str, Curve]:
    """{side name: Curve} of one race's JSON, or of several joined by "+" (each side from the
    first file that has it)."""
    curves: dict[str, Curve] = {}
    for path in paths.split("+"):
        with open(path) as f:
            for name, fields in json.load(f).items():
                curves.setdefault(name, Curve(**fields))
    return curves


def race_ratio(curves: dict[str, Curve], level: float) -> tuple[float | None, str]:
    """(ours / TRL's seconds to `level`, "") or (None, why not) for one race."""
    ours, trl = curves.get(SYSTEMS["ours"]), curves.get(SYSTEMS["trl"])
    if ours is None or trl is None:
        return None, "the race lacks a side"
    ours_s, trl_s = ours.time_to(level), trl.time_to(level)
    if ours_s is None or trl_s is None:
        missing = " and ".join(n for n, s in (("ours", ours_s), ("TRL", trl_s)) if s is None)
        return None, f"{missing} did not reach {100 * level:.1f}%"
    if trl_s <= 0 or ours_s <= 0:
        return None, "a side was at the level before training (the ratio would time loading)"
    return ours_s / trl_s, ""


def step_seconds(curve: Curve) -> float | None:
    """Training seconds a step from the evaluation before the first step to the last one
    (compiles included, model loading not); None for a curve without a step."""
    first, last = curve.points[0], curve.points[-1]
    steps = last["step"] - first["step"]
    return (last["wall_s"] - first["wall_s"]) / steps if steps > 0 else None


def race_step_ratio(curves: dict[str, Curve]) -> float | None:
    """Ours over TRL's training seconds a step in one race (its speed, whatever was learned)."""
    ours, trl = curves.get(SYSTEMS["ours"]), curves.get(SYSTEMS["trl"])
    if ours is None or trl is None:
        return None
    ours_s, trl_s = step_seconds(ours), step_seconds(trl)
    return ours_s / trl_s if ours_s and trl_s else None


def geometric_interval(ratios: Sequence[float], confidence: float = 0.95):
    """(geometric mean, low, high) of positive ratios: a Student-t interval of their logs,
    exponentiated. One ratio has no interval (low = high = the ratio)."""
    logs = [math.log(r) for r in ratios]
    mean = sum(logs) / len(logs)
    if len(logs) < 2:
        return math.exp(mean), math.exp(mean), math.exp(mean)
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / (len(logs) - 1))
    half = stats.t.ppf(0.5 + confidence / 2, len(logs) - 1) * sd / math.sqrt(len(logs))
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "races", nargs="+", help='time_to_accuracy.py --out JSON files ("A.json+B.json": one race)'
    )
    parser.add_argument("--level", type=float, required=True, help="held-out accuracy, 0-1")
    args = parser.parse_args(argv)
    print(f"# command: python {' '.join(sys.argv)}")
    print(
        f"\n| race | ours / TRL, seconds to {100 * args.level:.1f}% | ours / TRL, seconds a "
        "step |\n| --- | --- | --- |"
    )
    ratios, step_ratios = [], []
    for path in args.races:
        curves = load_race(path)
        ratio, why = race_ratio(curves, args.level)
        step_ratio = race_step_ratio(curves)
        print(
            f"| {path} | {f'{ratio:.2f}' if ratio is not None else f'no ratio: {why}'} "
            f"| {f'{step_ratio:.2f}' if step_ratio is not None else 'none'} |"
        )
        ratios += [ratio] if ratio is not None else []
        step_ratios += [step_ratio] if step_ratio is not None else []
    for what, values in (("seconds a step", step_ratios), ("time to the level", ratios)):
        if not values:
            continue
        mean, low, high = geometric_interval(values)
        sketch = " (fewer than 3 races: a sketch)" if len(values) < 3 else ""
        print(
            f"\n{what}, geometric mean over {len(values)} races: {mean:.2f} [{low:.2f}, "
            f"{high:.2f}] (95%, Student t on the logs){sketch}; below 1 ours is faster."
        )
    if not ratios:
        print("\nNo race gives a ratio at this level.")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
