"""Time to accuracy over seeds: our time over TRL's at one level, with its 95% interval.

Each argument is one race's curves (`time_to_accuracy.py --out OUT` writes OUT.json), one seed
a race (`--set seed=S`), all run with the same recipe, level and machine. For every race the
ratio is our training seconds to the first held-out evaluation at or above `--level` over
TRL's. The ratios combine on the log scale: their geometric mean and a Student-t 95% interval
over the races (the spread between seeds; each race's own timing noise is inside it). A race
where a side never reached the level gives only a bound and is listed apart, not averaged.

    python experiments/benchmarks/time_to_accuracy_seeds.py --level 0.18 \\
        race_s0.json race_s1.json race_s2.json
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


def load_race(path: str) -> dict[str, Curve]:
    """{side name: Curve} of one race's JSON."""
    with open(path) as f:
        return {name: Curve(**fields) for name, fields in json.load(f).items()}


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
    parser.add_argument("races", nargs="+", help="time_to_accuracy.py --out JSON files")
    parser.add_argument("--level", type=float, required=True, help="held-out accuracy, 0-1")
    args = parser.parse_args(argv)
    print(f"# command: python {' '.join(sys.argv)}")
    print(f"\n| race | ours / TRL, seconds to {100 * args.level:.1f}% |\n| --- | --- |")
    ratios = []
    for path in args.races:
        ratio, why = race_ratio(load_race(path), args.level)
        print(f"| {path} | {f'{ratio:.2f}' if ratio is not None else f'no ratio: {why}'} |")
        if ratio is not None:
            ratios.append(ratio)
    if not ratios:
        print("\nNo race gives a ratio at this level.")
        return 1
    mean, low, high = geometric_interval(ratios)
    sketch = " (fewer than 3 races: a sketch)" if len(ratios) < 3 else ""
    print(
        f"\nGeometric mean over {len(ratios)} races: {mean:.2f} [{low:.2f}, {high:.2f}] "
        f"(95%, Student t on the logs){sketch}; below 1 ours is faster."
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
