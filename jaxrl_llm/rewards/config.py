"""The `config.rewards` section: the reward functions of a run and how they combine.

The task scorer (`jaxrl_llm.rewards.verifiers`), optional format and length rewards, chance
correction (`jaxrl_llm.rewards.chance`), reward models and their ensembles
(`jaxrl_llm.rewards.ensemble`), and a process reward model's refined step rewards
(`jaxrl_llm.rewards.process`), summed or placed densely on tokens.
"""

from __future__ import annotations

import ml_collections

from jaxrl_llm.rewards.chance import task_answer_prior
from jaxrl_llm.rewards.ensemble import ENSEMBLE_MODES
from jaxrl_llm.rewards.model_check import validate_model_check
from jaxrl_llm.rewards.process import PLACEMENTS, check_eta, check_step_marker
from jaxrl_llm.rewards.refinement import REFINEMENTS
from jaxrl_llm.rewards.user import ON_ERROR
from jaxrl_llm.rewards.user_loading import parse_function_specs, parse_function_weights
from jaxrl_llm.rewards.verifiers import check_answer_rule

__all__ = ["rewards_section", "validate_rewards_section"]


def rewards_section() -> ml_collections.ConfigDict:
    """The default `config.rewards` (the task scorer alone, weight 1)."""
    c = ml_collections.ConfigDict()
    # Weight of the task scorer on the completion's answer (1 = correct; see answer_rule).
    c.task_weight = 1.0
    # Keep the task scorer's partial credit (reasoning-gym: len(reference) / len(answer) when
    # the reference is a substring). Off: the task reward is 1 for a right answer, else 0;
    # partial credit was farmed on gcd ("315" for 3; docs/recipe.md).
    c.partial_credit = False
    # How the task reward reads a completion's answer (jaxrl_llm.rewards.extract_answer):
    # "last_number" (its last number; pays for ending on a number copied from the question, the
    # lcm hack of docs/recipe.md) or "stated" (the last number unless it copies a question
    # number with no "=", "is", "equals", "answer:" ... before it; then the last stated number).
    # The evaluator reads answers the same way.
    c.answer_rule = "last_number"
    # Chance correction (Cohen's kappa per sample, jaxrl_llm.rewards.chance): a wrong answer a
    # also costs q(a) / (1 - q(a)), q(a) its share among the training pool's reference answers,
    # so a constant answer earns 0 in expectation (gcd's "2"); a right answer still earns 1.
    # Added as the reward "chance" with task_weight; reward/accuracy stays plain correctness.
    # Needs a task whose answers are single numbers.
    c.chance_correction = False
    # Weight of the optional format reward (0 disables it).
    c.format_weight = 0.0
    # Weight of a reward for length alone (min(words / length_max_words, 1)); 0 disables it.
    # A policy farms it: the reward hack the constraints of docs/constraints.md hold off.
    c.length_weight = 0.0
    c.length_max_words = 64
    # Seconds a reward function may take per sample before it counts as 0; a user's batch
    # function (`functions`) may take this long over the whole batch.
    c.timeout_s = 5.0
    # Reward functions of your own, in TRL's batch shape fn(prompts, completions, **columns) ->
    # list[float | None], comma-separated: "package.module:function" or "path/to/file.py:function"
    # (docs/rewards.md). Each is logged as reward/<function> and added to the rewards above;
    # Python callables come as build_rewards(config, reward_fns=[...]); "" = none.
    c.functions = ""
    # Their weights, comma-separated, aligned with `functions` then the Python callables;
    # "" = 1.0 each.
    c.function_weights = ""
    # What a user function that raises, hangs or returns a bad value (NaN, a string, a list of
    # the wrong length) does: "skip" (the samples it gave no valid value get its mean over their
    # group's valid ones, counted as reward/<function>/skipped; None from the function means the
    # same) or "stop" (the run stops with one line naming the function and what it returned).
    c.on_error = "skip"
    # A reward model: the directory of a saved scalar-head model (`save_scalar_model`), scored
    # on device at the last token of prompt + completion and added with `model_weight`; "" = none.
    # Several directories, comma-separated, make an ensemble combined by `ensemble`.
    c.model = ""
    c.model_weight = 1.0
    # How an ensemble of reward models combines: "mean", "min" or "mean_minus_std" (mean - k std,
    # k = ensemble_k); see jaxrl_llm.rewards.ensemble.
    c.ensemble = "mean"
    c.ensemble_k = 1.0
    # Whiten each reward model's scores over the step's samples (mean 0, std 1) before they
    # are combined and weighted (jaxrl_llm.rewards.ensemble.WhitenedReward): puts ensemble
    # members on one scale and fixes the reward's scale for PPO's critic (TRL's whiten_rewards).
    # reward/model then logs the whitened score (mean 0 over the step's samples).
    c.model_whiten = False
    # Whether the reward model still agrees with the verifier on each step's own samples
    # (jaxrl_llm.rewards.model_check; Gao et al. 2023's proxy-gold divergence): the AUC of its
    # scores at telling the verifier's right samples from its wrong ones is logged as
    # reward/model_verifier_auc (1: agree, 0.5: chance). Under model_check_auc for
    # model_check_steps steps in a row, model_check_action: "flag" (a warning and
    # reward/model_check_flagged on the step) or "stop" (the step is saved and evaluated and the
    # run ends as finished, summary.json's "ended_early" saying why: a sweep does not rerun it).
    # 0 = no check (the AUC is still logged).
    c.model_check_auc = 0.0
    c.model_check_steps = 3
    c.model_check_action = "flag"
    # A process reward model (`process_reward_model` stage): its per-step scores, refined by
    # `process_refinement` ("none", "clip" with threshold `process_eta` in (0, 1], or "delta";
    # Gao et al. 2024) and summed, are added with `process_weight`; "" = none. Steps split on
    # `step_marker` (the model's own, `prm.marker`: a different one is refused); a completion
    # without it is one step (jaxrl_llm/rewards/process.py).
    c.process_model = ""
    c.process_weight = 1.0
    c.process_refinement = "none"
    c.process_eta = 0.5
    c.step_marker = "\n"
    # Where the process reward enters RL: "summed" into each completion's reward (every
    # algorithm), or "dense": each step's refined reward on the step's last token and the
    # success reward on the final token, turned into per-token advantages by a critic's GAE
    # (PPO only; Gao et al.'s setting). Same return either way; dense changes the credit.
    c.process_placement = "summed"
    # Log `reward/process_steps` (steps per completion, split on `step_marker`) also without a
    # process model, so that a success-only baseline shows the step counts its PRM arms are
    # compared on (does the step-repeating hack appear?). With a process model the
    # count is always logged.
    c.count_steps = False
    return c


def validate_rewards_section(config: ml_collections.ConfigDict) -> None:
    """Raises ValueError naming the first bad `config.rewards` field and the fix (with what it
    needs of `config.env` and `config.task`)."""
    if config.rewards.ensemble not in ENSEMBLE_MODES or config.rewards.ensemble_k < 0:
        raise ValueError(
            f"config.rewards.ensemble={config.rewards.ensemble!r} must be one of "
            f"{ENSEMBLE_MODES} and config.rewards.ensemble_k={config.rewards.ensemble_k} >= 0."
        )
    check_answer_rule(config.rewards.get("answer_rule", "last_number"))
    validate_model_check(config.rewards)
    if config.rewards.get("model_whiten", False) and not config.rewards.model:
        raise ValueError(
            "config.rewards.model_whiten=True whitens a reward model's scores, and "
            "config.rewards.model is empty: set config.rewards.model or model_whiten=False."
        )
    _validate_user_functions(config.rewards)
    if config.rewards.get("chance_correction"):
        if config.env.name:
            raise ValueError(
                f"config.rewards.chance_correction=True corrects the single-turn task reward; "
                f"episodes of config.env.name={config.env.name!r} are scored by their "
                "environment: set config.rewards.chance_correction=False."
            )
        task_answer_prior(config.task, seed=config.seed)  # answers that are not single numbers
    if config.rewards.process_refinement not in REFINEMENTS or not config.rewards.step_marker:
        raise ValueError(
            f"config.rewards.process_refinement={config.rewards.process_refinement!r} must be "
            f"one of {REFINEMENTS}, and config.rewards.step_marker non-empty."
        )
    placement = config.rewards.get("process_placement", "summed")
    if placement not in PLACEMENTS:
        raise ValueError(
            f"config.rewards.process_placement={placement!r} must be one of {PLACEMENTS}."
        )
    if config.rewards.process_model:
        if config.rewards.process_refinement == "clip":
            check_eta(config.rewards.process_eta, field="config.rewards.process_eta")
        check_step_marker(
            config.rewards.process_model,
            config.rewards.step_marker,
            field="config.rewards.step_marker",
        )
    if placement == "dense" and not config.rewards.process_model:
        raise ValueError(
            "config.rewards.process_placement='dense' places a process reward model's step "
            "rewards, and config.rewards.process_model is empty: set it (the "
            "process_reward_model stage's output) or process_placement='summed'."
        )
    if placement == "dense" and config.env.name:
        raise ValueError(
            "config.rewards.process_placement='dense' applies to single-turn rollouts, not to "
            f"episode runs (config.env.name={config.env.name!r}): set process_placement='summed'."
        )


def _validate_user_functions(section: ml_collections.ConfigDict) -> None:
    """The user reward fields' forms (`build_rewards` imports the functions): on_error, the
    "module:function" entries and, when no weight is left for Python callables, the weights."""
    on_error = section.get("on_error", "skip")
    if on_error not in ON_ERROR:
        raise ValueError(f"config.rewards.on_error={on_error!r} must be one of {ON_ERROR}.")
    specs = parse_function_specs(section.get("functions", ""))
    weights = section.get("function_weights", "")
    # more weights than entries may be those of Python callables (`build_rewards` checks them)
    count = max(len(specs), len([w for w in weights.split(",") if w.strip()]))
    parse_function_weights(weights, count)
