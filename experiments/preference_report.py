"""The equal-time comparison table of docs/preference.md, read from finished run directories.

    python experiments/preference_report.py runs/cmp_grpo runs/cmp_online_dpo runs/cmp_rest_em ...

Each directory is an online RL run (GRPO, online DPO, RRHF), a self-training run (ReST-EM, RAFT)
or an offline preference run; the table gives held-out greedy accuracy before and after, the
steps (or updates, or iterations) done within the time budget, the seconds they took
(evaluations excluded) and seconds per step.
"""

from __future__ import annotations

import json
import os
import sys


def _load(path: str) -> dict:
    with open(path) as f:
        return json.load(f)


def row(workdir: str) -> list[str]:
    """One markdown row of a finished run directory."""
    summary = _load(os.path.join(workdir, "summary.json"))
    config = _load(os.path.join(workdir, "config.json"))
    stage, mark = config.get("stage", "rl"), ""
    if stage == "self_training":
        its = summary["iterations"]
        name = config["self_training"]["method"]
        before, after = summary["eval_before"]["accuracy"], summary["eval_after"]["accuracy"]
        steps, seconds = f"{len(its)} iterations", summary["train_time_s"]
        per = seconds / len(its)
        extra = "accepted " + ", ".join(f"{100 * it['accepted_fraction']:.0f}%" for it in its)
    elif stage == "preference":
        name = f"offline {config['preference']['loss_type']}"
        # "eval/task/accuracy" in runs made before the stage logged the task as RL runs do
        before, after = (
            summary[when].get("eval/accuracy", summary[when].get("eval/task/accuracy"))
            for when in ("before", "after")
        )
        updates = summary["steps"]
        seconds, mark = _update_seconds(workdir)
        steps, per = f"{updates} updates", seconds / updates
        pairs = summary["pairs"]
        extra = (
            f"{pairs['train_pairs']} train pairs; held-out pair reward accuracy "
            f"{100 * summary['after']['eval/reward_accuracy']:.0f}%"
        )
        if "seconds" in pairs:
            extra += f"; pairs made in {pairs['seconds']:.0f} s (not in the budget)"
    else:
        name = summary["algorithm"]
        if name == "rrhf":  # runs older than the option fine-tuned on tied groups
            loss = config["loss"]
            name += " (paper: fine-tuning on tied groups)" if loss.get("ft_on_ties", True) else ""
            name += " + gold references" if loss.get("reference_template") else ""
        before, after = summary["eval_before"]["accuracy"], summary["eval_after"]["accuracy"]
        seconds, count = summary["train_time_s"], summary["steps"]
        steps, per = f"{count} steps", seconds / count
        extra = ""
    return [
        name,
        f"{100 * before:.1f}% -> **{100 * after:.1f}%**",
        steps,
        f"{mark}{seconds:.0f}",
        f"{mark}{per:.1f}",
        extra,
    ]


def _update_seconds(workdir: str) -> tuple[float, str]:
    """(seconds of the offline stage's updates, "" or "<" when only the budget bounds them):
    runs written before the stage logged `update_time_s` stopped right after the update that
    passed `train.max_time_s`."""
    summary = _load(os.path.join(workdir, "summary.json"))
    if "update_time_s" in summary:
        return summary["update_time_s"], ""
    return _load(os.path.join(workdir, "config.json"))["train"]["max_time_s"], "~"


def main(workdirs: list[str]) -> None:
    header = ["method", "held-out greedy accuracy", "done in the budget", "seconds", "s/step", ""]
    print("| " + " | ".join(header) + " |")
    print("|" + " --- |" * len(header))
    for workdir in workdirs:
        print("| " + " | ".join(row(workdir)) + " |")


if __name__ == "__main__":
    main(sys.argv[1:])
