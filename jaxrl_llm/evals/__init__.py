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
from jaxrl_llm.evals.suite import (
    Decoded,
    EvalSet,
    EvalSettings,
    Evaluator,
    describe_held_out,
    markdown_table,
)

__all__ = [
    "TEMPLATES",
    "AttackTemplate",
    "Decoded",
    "EvalSet",
    "EvalSettings",
    "Evaluator",
    "KappaIntervals",
    "adversarial_problems",
    "attacked_examples",
    "describe_held_out",
    "kappa",
    "kappa_intervals",
    "maj_at_k",
    "majority_answer",
    "markdown_table",
    "pass_at_k",
    "robustness",
    "search_attacks",
]
