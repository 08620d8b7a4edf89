"""Completion-length budgets per prompt class (IBPO), as Lagrangian constraints.

IBPO (Yu et al. 2025, "Think Smarter not Harder: Adaptive Reasoning with Inference Aware
Optimization", arXiv:2501.17974) trains a policy to reason within an inference budget by
constrained policy optimisation. The formulation implemented here is a Lagrangian relaxation of
a per-class budget on each completion (not the paper's optimal-sampling solver over discrete
length groups): for each prompt class c (an `Example.source`) with token budget B_c,
    max_pi E[r]   s.t.   E[ (n / B_c - 1)+ | class c ] <= 0,
i.e. no completion of class c longer than B_c tokens (so their mean is within budget too), where
n is a completion's length. The shaped reward is r - lambda_c (n / B_c - 1)+ and lambda_c follows
dual ascent (`lagrangian.dual_ascent`) on the mean excess: it grows while completions run over
and stays put once none does. Only the excess costs: a penalty on every token (n / B_c) made
GRPO's group-normalised advantages push groups whose answers were all wrong toward ever shorter
completions, and the policy collapsed to empty answers within 8 steps (measured,
docs/constraints.md). Costs are relative to the budget, so one dual learning rate suits every
class.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np


def parse_budgets(spec: str, *, field: str = "config.constraints.budgets") -> dict[str, int]:
    """ "chain_sum:24,gcd:32" -> {"chain_sum": 24, "gcd": 32}; ValueError naming `field`."""
    budgets = {}
    for item in filter(None, (p.strip() for p in spec.split(","))):
        name, _, value = item.partition(":")
        if not name or not value.strip().isdigit() or int(value) <= 0:
            raise ValueError(
                f"{field}={spec!r}: {item!r} must be <prompt class>:<positive token budget>, "
                "e.g. 'chain_sum:24'."
            )
        budgets[name.strip()] = int(value)
    return budgets


def length_costs(
    lengths_b: np.ndarray, classes_b: Sequence[str], budgets: Mapping[str, int]
) -> np.ndarray:
    """float32 [C, B]: the excess (n_b / B_c - 1)+ for rows of class c, NaN for rows of other
    classes (C = the budgets in their order)."""
    lengths = np.asarray(lengths_b, np.float64)
    costs = np.full((len(budgets), len(lengths)), np.nan)
    classes = np.asarray(list(classes_b))
    for k, (name, budget) in enumerate(budgets.items()):
        rows = classes == name
        costs[k, rows] = np.maximum(lengths[rows] / budget - 1.0, 0.0)
    return costs.astype(np.float32)


def budget_metrics(
    lengths_b: np.ndarray, classes_b: Sequence[str], budgets: Mapping[str, int]
) -> dict[str, float]:
    """Per class: mean length, its budget, and the fraction of completions over the budget."""
    lengths, classes = np.asarray(lengths_b, np.float64), np.asarray(list(classes_b))
    out = {}
    for name, budget in budgets.items():
        rows = lengths[classes == name]
        if rows.size:
            out[f"budget/{name}/mean_length"] = float(rows.mean())
            out[f"budget/{name}/budget"] = float(budget)
            out[f"budget/{name}/over_budget"] = float((rows > budget).mean())
    return out
