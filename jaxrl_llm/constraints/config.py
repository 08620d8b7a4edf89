"""`config.constraints` -> the judges and the `ConstraintSpec` of a run.

    --config.constraints.mode=lagrangian --config.constraints.judges=length:24,format
    --config.constraints.bounds=0.05,0.02 --config.constraints.budgets=chain_sum:12

Judges by name: "length:N" (over N words), "format" (not a short answer with exactly one
number: `format_reward` is 0), "verifier" (the task's answer is wrong), "repetition" (a word
3-gram more than twice), "llm" (the LLM judge over the policy's frozen base weights, with
`constraints.llm_question` and `constraints.llm_threshold`).
"""

from __future__ import annotations

import ml_collections

from jaxrl_llm.constraints.budget import parse_budgets
from jaxrl_llm.constraints.judges import LengthJudge, RepetitionJudge, VerifierJudge
from jaxrl_llm.constraints.spec import MODES, ConstraintSpec

JUDGE_NAMES = ("length", "format", "verifier", "repetition", "llm")


def constraints_section() -> ml_collections.ConfigDict:
    """The defaults: no constraints."""
    from jaxrl_llm.constraints.llm_judge import DEFAULT_QUESTION

    return ml_collections.ConfigDict(
        dict(
            # "none", "lagrangian" (multipliers by dual ascent), or CGPO's "crpg", "crraft",
            # "codpo" (judges as hard filters; codpo wraps online_dpo).
            mode="none",
            # Comma-separated judges (see jaxrl_llm/constraints/config.py). With mode "none" they
            # only watch: their violation rates are logged as reward/judge/<name>.
            judges="",
            # Allowed violation rate of each judge, comma-separated (mode lagrangian).
            bounds="",
            # IBPO-style token budgets per prompt class (task): "chain_sum:12,gcd:24".
            budgets="",
            dual_lr=0.5,
            max_multiplier=10.0,
            judge_timeout_s=10.0,
            llm_question=DEFAULT_QUESTION,
            llm_threshold=0.5,
        )
    )


def judge_names(config: ml_collections.ConfigDict) -> tuple[str, ...]:
    """The judges' names ("length:24" is named "length")."""
    items = [j.strip() for j in config.constraints.judges.split(",") if j.strip()]
    return tuple(item.partition(":")[0] for item in items)


def constraint_spec(config: ml_collections.ConfigDict):
    """The run's `ConstraintSpec`, or None for mode "none" (ValueError naming the field)."""

    section = config.get("constraints")
    if section is None:
        return None
    if section.mode == "none":
        build_judges(config, llm=None, check_only=True)  # judges that only watch
        return None
    if section.mode not in MODES:
        raise ValueError(f"config.constraints.mode={section.mode!r} must be one of {MODES}.")
    build_judges(config, llm=None, check_only=True)
    names = judge_names(config)
    bounds = ()
    if section.mode == "lagrangian":
        try:
            bounds = tuple(float(b) for b in section.bounds.split(",") if b.strip())
        except ValueError:
            bounds = None
        if bounds is None or len(bounds) != len(names) or any(not 0 <= b <= 1 for b in bounds):
            raise ValueError(
                f"config.constraints.bounds={section.bounds!r} must give one violation rate in "
                f"[0, 1] per judge {names}."
            )
    elif not names:
        raise ValueError(
            f"config.constraints.mode={section.mode!r} filters by judges: set "
            "config.constraints.judges."
        )
    budgets = parse_budgets(section.budgets)
    if section.mode == "lagrangian" and not names and not budgets:
        raise ValueError("config.constraints: mode 'lagrangian' needs judges or budgets.")
    if not section.dual_lr > 0 or not section.max_multiplier > 0:
        raise ValueError(
            f"config.constraints.dual_lr={section.dual_lr} and max_multiplier="
            f"{section.max_multiplier} must be > 0."
        )
    return ConstraintSpec(
        mode=section.mode,
        judges=names,
        bounds=bounds,
        budgets=budgets,
        dual_lr=float(section.dual_lr),
        max_multiplier=float(section.max_multiplier),
    )


def build_judges(config: ml_collections.ConfigDict, *, llm=None, check_only: bool = False):
    """name -> judge of `config.constraints.judges`; `llm` is `(question, threshold) -> judge`
    (the runner builds it over the policy's frozen base weights)."""
    from jaxrl_llm.rewards import exact_task_reward, format_reward

    judges = {}
    for item in filter(None, (j.strip() for j in config.constraints.judges.split(","))):
        name, _, arg = item.partition(":")
        if name not in JUDGE_NAMES:
            raise ValueError(
                f"config.constraints.judges: unknown judge {name!r}; use {JUDGE_NAMES}."
            )
        if name in judges:
            raise ValueError(f"config.constraints.judges names {name!r} twice.")
        if name == "length":
            if not arg.isdigit() or int(arg) <= 0:
                raise ValueError(
                    f"config.constraints.judges: {item!r} must be length:<max words>, e.g. "
                    "length:24."
                )
            judges[name] = LengthJudge(max_words=int(arg))
        elif arg:
            raise ValueError(f"config.constraints.judges: {name!r} takes no argument ({item!r}).")
        elif name == "format":
            judges[name] = VerifierJudge(format_reward)
        elif name == "verifier":
            judges[name] = VerifierJudge(exact_task_reward)
        elif name == "repetition":
            judges[name] = RepetitionJudge()
        elif not check_only:
            judges[name] = llm(config.constraints.llm_question, config.constraints.llm_threshold)
    return judges
