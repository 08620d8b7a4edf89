"""Constraints on RL post-training: judges, CGPO's constrained optimisers, Lagrangian
multipliers and per-class length budgets (IBPO). See docs/constraints.md.

Pure functions of arrays (`lagrangian`, `cgpo`, `budget`) and judges of text (`judges`,
`llm_judge`); `jaxrl_llm.algorithms.constrained.constrain` applies them to any algorithm.
"""

from jaxrl_llm.constraints.budget import budget_metrics, length_costs, parse_budgets
from jaxrl_llm.constraints.cgpo import (
    calibrated_rewards,
    codpo_scores,
    crpg_rewards,
    crraft_advantages,
)
from jaxrl_llm.constraints.judges import (
    FormatJudge,
    JudgeMixture,
    JudgeOutput,
    LengthJudge,
    RegexJudge,
    RepetitionJudge,
    Verdict,
    VerifierJudge,
)
from jaxrl_llm.constraints.lagrangian import constraint_values, dual_ascent, lagrangian_rewards

__all__ = [
    "FormatJudge",
    "JudgeMixture",
    "JudgeOutput",
    "LengthJudge",
    "RegexJudge",
    "RepetitionJudge",
    "Verdict",
    "VerifierJudge",
    "budget_metrics",
    "calibrated_rewards",
    "codpo_scores",
    "constraint_values",
    "crpg_rewards",
    "crraft_advantages",
    "dual_ascent",
    "lagrangian_rewards",
    "length_costs",
    "parse_budgets",
]
