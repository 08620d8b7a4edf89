"""Evaluation: greedy pass@1, sampled pass@k and maj@k over several prompt sets, held-out
accuracy beyond chance (Cohen's kappa), and the adversarial-arithmetic robustness evaluation.
The command line is `python -m jaxrl_llm.evaluate`.
"""

from jaxrl_llm.evals.adversarial import (
    TEMPLATES,
    AttackTemplate,
    adversarial_problems,
    attacked_examples,
    robustness,
    search_attacks,
)
from jaxrl_llm.evals.agreement import KappaIntervals, kappa, kappa_intervals
from jaxrl_llm.evals.estimators import maj_at_k, majority_answer, pass_at_k
from jaxrl_llm.evals.scorers import (
    DEFAULT_SCORER,
    SCORERS,
    HeldOutScorer,
    get_scorer,
    register_scorer,
    scorer_of_run,
)
from jaxrl_llm.evals.suite import (
    SELECTION_SET,
    Decoded,
    EvalSet,
    EvalSettings,
    Evaluator,
    describe_held_out,
    markdown_table,
)

__all__ = [
    "DEFAULT_SCORER",
    "SCORERS",
    "SELECTION_SET",
    "TEMPLATES",
    "AttackTemplate",
    "Decoded",
    "EvalSet",
    "EvalSettings",
    "Evaluator",
    "HeldOutScorer",
    "KappaIntervals",
    "adversarial_problems",
    "attacked_examples",
    "describe_held_out",
    "get_scorer",
    "kappa",
    "kappa_intervals",
    "maj_at_k",
    "majority_answer",
    "markdown_table",
    "pass_at_k",
    "register_scorer",
    "robustness",
    "scorer_of_run",
    "search_attacks",
]
