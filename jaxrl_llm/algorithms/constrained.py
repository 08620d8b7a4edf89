"""Any algorithm under constraints: judges' violation rates and per-class length budgets.

`constrain(algorithm, spec)` returns an `Algorithm` that reshapes each step's rewards before the
wrapped one turns them into advantages or pairs (`jaxrl_llm.constraints`):

- mode "lagrangian": r - sum_k lambda_k c_k over the judges (c = 1 when violated, bound = the
  allowed violation rate) and the length budgets (c = the excess (n / B_c - 1)+, bound 0), the
  multipliers updated by dual ascent after each step (Tessler et al. 2019; multi-objective rewards held by
  multipliers as in Moskovitz et al. 2023).
- mode "crpg" / "crraft" / "codpo": CGPO (Xu et al. 2024): judges are hard filters. CRPG wraps a
  policy-gradient algorithm (its rewards become calibrated, 0 when violated), CRRAFT imitates
  each group's best feasible generation (advantages 1 / 0, the wrapped algorithm's loss), CODPO
  wraps online DPO (chosen: best feasible; rejected: worst violating). Length budgets, if any,
  still act through their multipliers.

The multipliers sit beside the wrapped algorithm's state (`{"base": ..., "multipliers":
[K + C]}`, no "multipliers" without any), checkpointed with the run. Each multiplier and its
constraint's batch value are logged as "constraint/<name>/multiplier" and ".../value", each
budgeted class's mean length and over-budget share as "budget/<class>/...".
"""

from __future__ import annotations

import numpy as np

from jaxrl_llm.algorithms.base import Algorithm, Experience
from jaxrl_llm.algorithms.batch import build_batch
from jaxrl_llm.constraints import budget as budget_lib
from jaxrl_llm.constraints import cgpo
from jaxrl_llm.constraints.judges import any_violated
from jaxrl_llm.constraints.lagrangian import constraint_values, dual_ascent, lagrangian_rewards
from jaxrl_llm.constraints.spec import MODES, ConstraintSpec

__all__ = ["MODES", "ConstraintSpec", "constrain"]


def _costs(spec: ConstraintSpec, experience: Experience) -> np.ndarray:
    """float32 [K' + C, B]: judge violations (lagrangian mode), then length costs."""
    parts = []
    if spec.mode == "lagrangian" and spec.judges:
        parts.append(_violations(spec, experience))
    if spec.budgets:
        sources = experience.sources
        if sources is None:
            raise ValueError("length budgets need Experience.sources (the rows' prompt classes).")
        lengths = np.asarray(experience.rollout.lengths)
        parts.append(budget_lib.length_costs(lengths, sources, spec.budgets))
    if not parts:
        return np.zeros((0, len(experience.rewards)), np.float32)
    return np.concatenate(parts, axis=0)


def _violations(spec: ConstraintSpec, experience: Experience) -> np.ndarray:
    v = experience.violations
    if v is None or v.shape[0] != len(spec.judges):
        got = None if v is None else v.shape
        raise ValueError(
            f"constrained {spec.mode}: expected violations of {len(spec.judges)} judges "
            f"{spec.judges}, got {got}; the runner's reward role must carry the judges."
        )
    return v


def constrain(algorithm: Algorithm, spec: ConstraintSpec) -> Algorithm:
    """`algorithm` with its rewards reshaped by `spec` (see the module docstring)."""
    if spec.mode not in MODES or spec.mode == "none":
        raise ValueError(f"constrain: mode={spec.mode!r} must be one of {MODES[1:]}.")
    if spec.mode == "codpo" and algorithm.name != "online_dpo":
        raise ValueError("constraints mode 'codpo' wraps online_dpo (config.algorithm).")
    if spec.mode in ("crpg", "crraft") and algorithm.name in ("online_dpo", "rrhf"):
        raise ValueError(
            f"constraints mode {spec.mode!r} wraps a policy-gradient algorithm, not "
            f"{algorithm.name!r} (use 'codpo' with online_dpo)."
        )
    if spec.mode == "lagrangian" and len(spec.bounds) != len(spec.judges):
        raise ValueError(
            f"constraints: {len(spec.judges)} judges {spec.judges} need as many bounds, got "
            f"{spec.bounds}."
        )
    names = spec.names
    bounds = np.asarray(
        (spec.bounds if spec.mode == "lagrangian" else ()) + (0.0,) * len(spec.budgets),
        np.float32,
    )

    def init():
        state = {"base": algorithm.init()}
        if names:  # Orbax cannot save a zero-size array
            state["multipliers"] = np.zeros(len(names), np.float32)
        return state

    def make_batch(experience: Experience, state):
        g = experience.group_size
        rewards = np.asarray(experience.rewards, np.float32)
        costs = _costs(spec, experience)
        scalars = {}
        if spec.budgets:  # mean length, budget and over-budget share of each class
            lengths = np.asarray(experience.rollout.lengths)
            scalars.update(budget_lib.budget_metrics(lengths, experience.sources, spec.budgets))
        if names:
            values = constraint_values(costs)
            rewards = lagrangian_rewards(rewards, costs, state["multipliers"])
            for name, value, lam in zip(names, values, state["multipliers"], strict=True):
                scalars[f"constraint/{name}/value"] = float(value)
                scalars[f"constraint/{name}/multiplier"] = float(lam)
        if spec.mode in ("crpg", "crraft", "codpo"):
            violated = any_violated(_violations(spec, experience))
            scalars["constraint/violated"] = float(violated.mean())
            if spec.mode == "crpg":
                rewards = cgpo.crpg_rewards(rewards, violated, g, experience.baseline_rewards)
            elif spec.mode == "codpo":
                rewards = cgpo.codpo_scores(rewards, violated, g)
            else:
                advantages = cgpo.crraft_advantages(rewards, violated, g)
                scalars["constraint/crraft_rows"] = float(advantages.sum())
                batch = build_batch(experience.rollout, advantages, ref_logp=experience.ref_logp)
                return batch, scalars
        batch, base_scalars = algorithm.make_batch(
            experience._replace(rewards=rewards), state["base"]
        )
        return batch, {**base_scalars, **scalars}

    def update(state, scalars):
        new = {"base": algorithm.update(state["base"], scalars)}
        if names:
            values = np.asarray([scalars[f"constraint/{n}/value"] for n in names], np.float32)
            new["multipliers"] = dual_ascent(
                state["multipliers"],
                values,
                bounds,
                learning_rate=spec.dual_lr,
                max_multiplier=spec.max_multiplier,
            )
        return new

    return algorithm._replace(init=init, make_batch=make_batch, update=update)
