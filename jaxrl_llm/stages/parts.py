"""Parts the supervised stages share: their config, its checks, their learners and evaluations.

config = stage_config("reward_model", "rm", rm_section())      # base fields + the section
learner = stage_learner(model, config, loss, num_steps=config.train.num_steps)
model, learner = scalar_head_learner(policy, config, rm_loss)  # a reward model's
greedy = GreedyEvaluation(config, model, tokenizer)              # the task, as RL runs log it
evaluate = PolicyEvaluation(config, held_out_loss, greedy, lambda: learner.params)
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from typing import Any

import ml_collections

from jaxrl_llm.evals.suite import flat_set_metrics
from jaxrl_llm.roles import Learner

__all__ = [
    "GreedyEvaluation",
    "PolicyEvaluation",
    "check_fit_fields",
    "check_positive_ints",
    "check_sampled_labels_section",
    "percent_change",
    "sampled_labels_fields",
    "scalar_head_learner",
    "stage_config",
    "stage_learner",
    "task_accuracy_change",
]


def stage_config(stage: str, section: str, fields: ml_collections.ConfigDict, **values: Any):
    """A locked stage config: the base fields, `stage`, and the stage's section `fields`
    (100 updates at learning rate 1e-5 unless the caller changes them), with the section's
    `values` set (e.g. `loss_type="kto"`)."""
    from jaxrl_llm.config import base_config

    c = base_config()
    c.stage = stage
    c[section] = fields
    c[section].update(values)
    c.train.num_steps = 100
    c.optimizer.learning_rate = 1e-5
    c.lock()
    return c


def sampled_labels_fields(
    c: ml_collections.ConfigDict, *, labels: str, num_prompts: int, group_size: int
) -> ml_collections.ConfigDict:
    """`c` with the fields of a section that trains on labelled items made from the policy's
    own samples (reward-model pairs, step labels, preference pairs), checked by
    `check_sampled_labels_section`."""
    c[labels] = ""  # a JSONL of labelled items; "" makes them (<workdir>/<labels>.jsonl)
    c.num_prompts = num_prompts  # task prompts sampled to make them
    c.group_size = group_size  # completions sampled per prompt
    c.temperature = 1.0
    c.max_new_tokens = 64
    c.batch_size = 8  # labelled items per optimizer update
    c.max_length = 256  # tokens of prompt + completion; longer items are dropped (counted)
    c.eval_fraction = 0.2  # share of the prompts whose items are held out
    c.eval_every = 0  # steps between held-out evaluations (0: before and after only)
    return c


def check_positive_ints(config, section: str, fields: tuple[str, ...]) -> None:
    """Raises ValueError naming the first of `config.<section>.<field>` that is not an integer
    >= 1."""
    for field in fields:
        value = config[section][field]
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"config.{section}.{field}={value!r} must be a positive integer.")


def check_fit_fields(config, section: str) -> None:
    """`config.<section>.eval_every` >= 0 and `train.num_steps` >= 1, the fields `fit` reads;
    raises ValueError naming the field."""
    s = config[section]
    if not isinstance(s.eval_every, int) or s.eval_every < 0:
        raise ValueError(f"config.{section}.eval_every={s.eval_every!r} must be an integer >= 0.")
    if not isinstance(config.train.num_steps, int) or config.train.num_steps < 1:
        raise ValueError(f"config.train.num_steps={config.train.num_steps!r} must be >= 1.")


def check_sampled_labels_section(config, section: str, positive: tuple[str, ...], *, labels: str):
    """The checks of a `sampled_labels_fields` section: the `positive` fields are positive
    integers, `eval_fraction` in (0, 1), `temperature` > 0, `eval_every` >= 0,
    `train.num_steps` >= 1, the `labels` file (when given) exists and the task resolves.
    Raises ValueError naming the field."""
    from jaxrl_llm.data.presets import resolve_task

    s = config[section]
    check_positive_ints(config, section, positive)
    if not 0 < s.eval_fraction < 1:
        raise ValueError(f"config.{section}.eval_fraction={s.eval_fraction} must be in (0, 1).")
    if not s.temperature > 0:
        raise ValueError(
            f"config.{section}.temperature={s.temperature} must be > 0 (labels need samples)."
        )
    check_fit_fields(config, section)
    if s[labels] and not os.path.isfile(s[labels]):
        raise ValueError(
            f"config.{section}.{labels}={s[labels]!r} does not exist ('' makes {labels})."
        )
    resolve_task(config.task.name, config.task.kwargs.to_dict())


def stage_learner(model, config, loss: Callable[..., Any], *, num_steps: int) -> Learner:
    """A supervised stage's `Learner` of `model`: `loss(model, batch)` minimised by the config's
    optimizer (its schedule spread over `num_steps` updates) on the placement's train mesh."""
    from jaxrl_llm.roles import make_placement
    from jaxrl_llm.runners.components import build_optimizer

    mesh = make_placement(config.placement).train_mesh
    return Learner(model, build_optimizer(config.optimizer, num_steps), loss, mesh)


def scalar_head_learner(policy, config, loss_fn: Callable[..., Any]):
    """A reward-model stage's model and its `Learner`: a `ScalarHeadModel` on `policy`'s trunk
    with a fresh head, trained by `loss_fn(model, batch, *, remat)` with the config's optimizer,
    placement and gradient checkpointing (`config.train.remat`).

    Returns:
      (the ScalarHeadModel, its Learner).
    """
    from jaxrl_llm.models.heads import ScalarHeadModel

    model = ScalarHeadModel.from_policy(policy, seed=config.seed, head_init="normal")
    loss = functools.partial(loss_fn, remat=config.train.remat)
    return model, stage_learner(model, config, loss, num_steps=config.train.num_steps)


class GreedyEvaluation:
    """`params -> metrics`: the held-out greedy evaluation of a stage's policy (`config.eval`,
    scored by `config.eval.scorer`), logged as an RL run logs its own (`SingleTurnSampler.evaluate`),
    so `jaxrl_llm.report` reads a stage's run as it reads an RL run.

    The sets are `eval_sets`, by default the run's (`components.build_eval_sets`: the task's
    test side, each of `config.eval.tasks`, and with `config.eval.selection` the selection
    side). The first set's metrics come unprefixed (accuracy, score, completion_length, ...),
    every other set's as "<set>/<metric>". `correct` and `details` hold the last call's
    per-question records ({set name: [Q] 0/1} and `Evaluator.details`), what
    `MetricsWriter.write_eval_questions` keeps. One `Evaluator` serves every call, so the
    decode compiles once per run.
    """

    def __init__(self, config, model, tokenizer, eval_sets: Sequence[Any] | None = None):
        from jaxrl_llm.evals import Evaluator
        from jaxrl_llm.runners import components
        from jaxrl_llm.runners.evaluation import eval_settings

        self.eval_sets = list(eval_sets or components.build_eval_sets(config))
        self.evaluator = Evaluator(
            model,
            tokenizer,
            components.build_scorer(config),
            eval_settings(config),
            timeout_s=config.rewards.timeout_s,
        )
        self.correct: dict[str, Any] = {}
        self.details: dict[str, dict[str, Any]] = {}

    def __call__(self, params) -> dict[str, float]:
        results = self.evaluator(self.eval_sets, params=params)
        self.correct, self.details = dict(self.evaluator.correct), dict(self.evaluator.details)
        return flat_set_metrics(results, self.eval_sets[0].name)


class PolicyEvaluation:
    """`evaluate(when)` of a stage that trains the policy itself (SFT, offline preference):
    `held_out()` at every evaluation, plus the task's held-out greedy metrics (`greedy` of
    `params()`, as "eval/<metric>" and "eval/<set>/<metric>", the keys an RL run logs) before
    and after when `config.eval.before` / `.after` ask and the stage has them (`greedy` not
    None). `take_records()` hands the greedy evaluation's per-question records to the writer
    once."""

    def __init__(
        self,
        config,
        held_out: Callable[[], dict[str, float]],
        greedy: GreedyEvaluation | None,
        params: Callable[[], Any],
    ):
        self.config, self.held_out, self.greedy, self.params = config, held_out, greedy, params
        self._records: tuple[dict, dict] = ({}, {})

    def __call__(self, when: str) -> dict[str, float]:
        scalars = self.held_out()
        asked = {"before": self.config.eval.before, "after": self.config.eval.after}.get(when)
        if asked and self.greedy is not None:
            task = self.greedy(self.params())
            scalars.update({f"eval/{k}": v for k, v in task.items() if _is_number(v)})
            self._records = (self.greedy.correct, self.greedy.details)
        return scalars

    def take_records(self) -> tuple[dict, dict]:
        """({set: [Q] 0/1}, {set: details}) of the greedy evaluation since the last call (empty
        when none ran)."""
        records, self._records = self._records, ({}, {})
        return records


def _is_number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def percent_change(summary: dict[str, Any], key: str) -> str:
    """ "a% -> b%": `summary`'s "before" and "after" values of `key` as percentages.

    Example:
      >>> percent_change({"before": {"acc": 0.1}, "after": {"acc": 0.25}}, "acc")
      '10.0% -> 25.0%'
    """
    return f"{100 * summary['before'][key]:.1f}% -> {100 * summary['after'][key]:.1f}%"


def task_accuracy_change(summary: dict[str, Any]) -> str:
    """ ", greedy accuracy a% -> b%" of a policy stage's summary (`PolicyEvaluation`), or ""
    when the evaluation before or after had no greedy task metrics."""
    key = "eval/accuracy"
    if key not in summary["before"] or key not in summary["after"]:
        return ""
    return f", greedy accuracy {percent_change(summary, key)}"
