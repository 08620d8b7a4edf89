"""The process reward-model stage: step labels by Monte Carlo completion, then per-step scores.

    python -m jaxrl_llm.main --config experiments/configs/prm_smollm2.py --workdir runs/prm

"Math-Shepherd: Verify and Reinforce LLMs Step-by-step without Human Annotations" (2312.08935):
the policy samples `prm.group_size` completions of `prm.num_prompts` task prompts; each is split
into steps (`rewards.refinement.split_steps` on `prm.marker`); from the prefix ending at each
step, `prm.rollouts` continuations are sampled and scored by the task's verifier. A step's label
is the fraction that reach the right answer ("soft") or whether any does ("hard"); the last
step's label is the completion's own score. Labels are written to `<workdir>/steps.jsonl`
(`read_step_labels` reads any file in that format).

The model starts from the policy's weights with a fresh head and learns the labels with a
per-step binary cross-entropy at each step's last token (`losses.reward_model.step_cross_entropy`);
held-out step accuracy and loss before / during / after, beside the constant predictor's (the
training steps' majority label) with the margin's 95% interval over held-out prompts; written to
`<workdir>/process_reward_model` with the step separator it learned (`step_marker.json`), which
the RL stage takes as `--config.rewards.process_model` (with `rewards.process_refinement` none /
clip / delta, `jaxrl_llm.rewards.process`; a `rewards.step_marker` other than `prm.marker` is
refused).
"""

from __future__ import annotations

import itertools
from typing import Any, NamedTuple

import jax
import ml_collections
import numpy as np

from jaxrl_llm.data.jsonl import json_objects, write_jsonl
from jaxrl_llm.data.presets import task_pool
from jaxrl_llm.evals.intervals import clustered_difference_interval
from jaxrl_llm.losses.reward_model import step_cross_entropy
from jaxrl_llm.models.heads import ScalarHeadModel
from jaxrl_llm.models.precision import merge_for_compute
from jaxrl_llm.rewards.process import step_token_ends, write_step_marker
from jaxrl_llm.rewards.refinement import split_steps
from jaxrl_llm.roles import place_batch
from jaxrl_llm.runners.components import load_policy
from jaxrl_llm.stages.data import labelled_items, step_indices
from jaxrl_llm.stages.parts import (
    check_sampled_labels_section,
    percent_change,
    sampled_labels_fields,
    scalar_head_learner,
    stage_config,
)
from jaxrl_llm.stages.sampling import task_sampler
from jaxrl_llm.stages.supervised import SupervisedStage, save_scalar_head, train_stage


def prm_section() -> ml_collections.ConfigDict:
    """The `config.prm` fields: `sampled_labels_fields` with the step-label file `steps`, and
    how steps are labelled."""
    c = sampled_labels_fields(
        ml_collections.ConfigDict(), labels="steps", num_prompts=64, group_size=4
    )
    c.rollouts = 4  # Monte Carlo continuations per step prefix
    c.label = "soft"  # "soft": fraction of continuations right; "hard": any right
    c.marker = "\n"  # step separator
    return c


def prm_config() -> ml_collections.ConfigDict:
    """The default process reward-model configuration (SmolLM2-135M-Instruct, chain_sum)."""
    return stage_config("process_reward_model", "prm", prm_section())


# How a step's continuations label it (`config.prm.label`).
LABELS = ("soft", "hard")


def validate_prm_config(config: ml_collections.ConfigDict) -> None:
    """Raises ValueError naming the first bad field of a process reward-model config."""
    p = config.prm
    positive = ("num_prompts", "group_size", "rollouts", "max_new_tokens", "batch_size")
    check_sampled_labels_section(config, "prm", positive, labels="steps")
    if not isinstance(p.max_length, int) or p.max_length < 2:
        raise ValueError(f"config.prm.max_length={p.max_length!r} must be an integer >= 2.")
    if p.label not in LABELS:
        raise ValueError(f"config.prm.label={p.label!r} must be one of {LABELS}.")
    if not p.marker:
        raise ValueError("config.prm.marker must be a non-empty step separator, e.g. '\\n'.")


def train_process_reward_model(config, workdir: str, *, progress: bool = True):
    """Runs (or resumes) the process reward-model stage; returns its summary (summary.json)."""
    return train_stage(PROCESS_REWARD_MODEL, config, workdir, progress=progress)


def _report(summary: dict[str, Any]) -> str:
    change = percent_change(summary, "eval/step_accuracy")
    positive = summary["labels"]["positive_step_fraction"]
    after = summary["after"]
    margin = ""
    if "eval/margin_over_constant" in after:  # summaries written before 2026-11-28 lack it
        low, high = after["eval/margin_over_constant_low"], after["eval/margin_over_constant_high"]
        verdict = "beats it" if low > 0 else "does not beat it by a margin its interval supports"
        margin = (
            f"; the constant predictor {100 * after['eval/constant_step_accuracy']:.1f}%, margin "
            f"{100 * after['eval/margin_over_constant']:+.1f} [{100 * low:+.1f}, {100 * high:+.1f}] "
            f"points (95%, held-out prompts resampled): {verdict}"
        )
    return (
        f"[jaxrl_llm] process reward model held-out step accuracy {change} (positive steps: "
        f"{100 * positive:.1f}%){margin}, written to {summary['process_reward_model']}"
    )


class StepLabels(NamedTuple):
    """One labelled completion: its prompt text, completion, and a label in [0, 1] per step."""

    prompt: str
    completion: str
    labels: list[float]


def read_step_labels(path: str, marker: str = "\n") -> list[StepLabels]:
    """Every line of a step-label JSONL ({"prompt", "completion", "labels"}); the completion's
    steps (split on `marker`) must be as many as its labels.

    Raises:
      ValueError: naming the file, line and field of the first bad line.
    """
    out = []
    for _, where, obj in json_objects(path, what="labelled completions"):
        for key, kind in (("prompt", str), ("completion", str), ("labels", list)):
            if not isinstance(obj.get(key), kind):
                raise ValueError(f"{where}: field {key!r} must be a {kind.__name__}.")
        labels = obj["labels"]
        if not all(isinstance(x, int | float) and 0 <= x <= 1 for x in labels):
            raise ValueError(f"{where}: field 'labels' must hold numbers in [0, 1].")
        steps = len(split_steps(obj["completion"], marker))
        if steps != len(labels) or not labels:
            raise ValueError(f"{where}: field 'labels' has {len(labels)} labels for {steps} steps.")
        out.append(StepLabels(obj["prompt"], obj["completion"], [float(x) for x in labels]))
    return out


def make_step_labels(
    config, policy, tokenizer, path: str, journal: str | None = None
) -> dict[str, float]:
    """Samples completions and labels their steps by Monte Carlo completion (module docstring);
    writes `path` and returns counts. `journal` keeps the decode calls, so that a rerun of a
    killed pass decodes only what it had not (`sampling.task_sampler`)."""
    p = config.prm
    source = task_pool(config.task, side="train", seed=config.seed)
    examples = list(itertools.islice(iter(source), p.num_prompts))
    sampler = task_sampler(
        config, policy, tokenizer, examples, max_new_tokens=p.max_new_tokens,
        temperature=p.temperature, journal=journal,
    )  # fmt: skip
    texts, scores = sampler.texts, sampler.score

    owner = [i for i in range(len(examples)) for _ in range(p.group_size)]
    completions = []
    for start in range(0, len(owner), 64):  # at most 64 rows a decode
        rows = [sampler.ids[i] for i in owner[start : start + 64]]
        completions += sampler.sample(rows, config.seed + start)
    final = scores([texts[i] for i in owner], completions, [examples[i] for i in owner])
    # Every step prefix but the last one of every completion, continued `rollouts` times.
    prefixes = []  # (completion index, step index, prefix text)
    for c, completion in enumerate(completions):
        for k, (_, end) in enumerate(split_steps(completion, p.marker)[:-1]):
            prefixes.append((c, k, completion[:end]))
    labels = [[0.0] * len(split_steps(c, p.marker)) for c in completions]
    chunk = max(1, 64 // p.rollouts)
    for start in range(0, len(prefixes), chunk):
        part = prefixes[start : start + chunk]
        prefix_ids = [tokenizer.encode(texts[owner[c]] + text) for c, _, text in part]
        batch = [x for x in prefix_ids for _ in range(p.rollouts)]
        seed = config.seed + len(owner) + start  # not a seed of the first sampling
        continued = sampler.sample(batch, seed)
        rows = [(c, text) for c, _, text in part for _ in range(p.rollouts)]
        right = scores(
            [texts[owner[c]] for c, _ in rows],
            [text + more for (_, text), more in zip(rows, continued, strict=True)],
            [examples[owner[c]] for c, _ in rows],
        ).reshape(len(part), p.rollouts)
        for (c, k, _), hits in zip(part, right, strict=True):
            labels[c][k] = float(hits.mean() if p.label == "soft" else hits.max())
    records = []
    for c, completion in enumerate(completions):
        if not labels[c]:
            continue  # an empty completion has no step
        labels[c][-1] = float(final[c])
        records.append({"prompt": texts[owner[c]], "completion": completion, "labels": labels[c]})
    write_jsonl(path, records)
    steps = [len(r["labels"]) for r in records]
    print(
        f"[jaxrl_llm] {sum(steps)} steps of {len(records)} completions labelled "
        f"({len(prefixes) * p.rollouts} continuations), written to {path}"
    )
    return {
        "completions": len(records),
        "steps": int(sum(steps)),
        "mean_steps": float(np.mean(steps)) if steps else 0.0,
        "continuations": len(prefixes) * p.rollouts,
        "sample_accuracy": float(np.mean(final)),
    }


class StepBatch(NamedTuple):
    """B labelled completions: tokens int32 [B, W]; ends int32 [B, S] (each step's last token);
    labels float32 [B, S]; mask bool [B, S]."""

    tokens: Any
    ends: Any
    labels: Any
    mask: Any


def prm_loss(model: ScalarHeadModel, batch: StepBatch, *, remat: bool | str = False):
    """Per-step cross-entropy of the model's scores at each step's last token; `remat` is the
    trunk's gradient checkpointing (`config.train.remat`)."""
    logits = model.scores_at(batch.tokens, batch.ends, remat=remat)
    return step_cross_entropy(logits, batch.labels, batch.mask)


def prm_eval(model: ScalarHeadModel, batch: StepBatch):
    """(loss [], step score logits float32 [B, S]) of a held-out batch."""
    logits = model.scores_at(batch.tokens, batch.ends)
    loss, _ = step_cross_entropy(logits, batch.labels, batch.mask)
    return loss, logits


class ProcessRewardModelRun:
    """One process reward-model run: labelled completions, the `Learner`, held-out evaluation
    (a `StageRun`)."""

    def __init__(self, config, workdir: str):
        self.config, p = config, config.prm
        policy, self.tokenizer = load_policy(config)
        split, self.label_stats = labelled_items(
            config, "prm", "steps", workdir,
            make=lambda path, journal: make_step_labels(
                config, policy, self.tokenizer, path, journal
            ),
            read=lambda path: read_step_labels(path, p.marker), encode=self._encode,
        )  # fmt: skip
        encoded = split.encoded
        self.eval_items, self.train_items = split.items(split.held), split.items(split.train)
        self.eval_prompts = [split.prompts[i] for i in split.held]
        # The constant predictor a PRM must beat: the training steps' majority label.
        train_labels = [x >= 0.5 for _, _, labels in self.train_items for x in labels]
        self.constant_label = bool(np.mean(train_labels) >= 0.5) if train_labels else True
        self.width = split.width
        self.max_steps = max(4, 1 << (max(len(e) for _, e, _ in encoded) - 1).bit_length())
        positive = np.mean([x >= 0.5 for _, _, labels in encoded for x in labels])
        self.label_stats.update(
            train=len(self.train_items),
            held_out=len(split.held),
            dropped=split.dropped,
            positive_step_fraction=float(positive),
        )
        self.pad_id = self.tokenizer.pad_token_id or 0
        self.model, self.learner = scalar_head_learner(policy, config, prm_loss)
        graphdef = self.learner.graphdef
        self._eval_fn = jax.jit(lambda params, b: prm_eval(merge_for_compute(graphdef, params), b))

    def _encode(self, item: StepLabels):
        """(prompt, (ids, each step's last token, labels), [ids])."""
        ids, ends = step_token_ends(
            self.tokenizer, item.prompt, item.completion, self.config.prm.marker
        )
        return item.prompt, (ids, ends, item.labels), [ids]

    def step_batch(self, items) -> StepBatch:
        n, width, most = len(items), self.width, self.max_steps
        tokens = np.full((n, width), self.pad_id, np.int32)
        ends = np.zeros((n, most), np.int32)
        labels = np.zeros((n, most), np.float32)
        mask = np.zeros((n, most), bool)
        for b, (ids, step_ends, step_labels) in enumerate(items):
            tokens[b, : len(ids)] = ids
            ends[b, : len(step_ends)] = step_ends
            labels[b, : len(step_labels)] = step_labels
            mask[b, : len(step_ends)] = True
        return StepBatch(tokens, ends, labels, mask)

    def batch(self, step: int):
        """Step `step`'s completions (epochs of a seeded permutation), placed."""
        size = self.config.prm.batch_size
        indices = step_indices(self.config.seed, step, size, len(self.train_items))
        items = [self.train_items[i] for i in indices]
        return place_batch(self.step_batch(items), self.learner.mesh, self.learner.rules)

    def evaluate(self, when: str) -> dict[str, float]:
        """Held-out step accuracy (score > 0 against label >= 0.5) and loss, and the same
        accuracy of the constant predictor (the training steps' majority label) with the
        model's margin over it, its 95% interval resampling held-out prompts (a prompt's
        completions and a completion's steps are not independent)."""
        del when
        size, weights, losses = self.config.prm.batch_size, [], []
        model_hits, constant_hits, steps = [], [], []  # per held-out completion
        for start in range(0, len(self.eval_items), size):
            chunk = self.eval_items[start : start + size]
            batch = self.step_batch(chunk + [chunk[0]] * (size - len(chunk)))
            mask = batch.mask.copy()
            mask[len(chunk) :] = False  # the filler rows do not count
            loss, logits = jax.device_get(
                self._eval_fn(self.learner.params, batch._replace(mask=mask))
            )
            losses.append(float(loss))
            weights.append(float(mask.sum()))
            right = batch.labels >= 0.5
            real = mask[: len(chunk)]
            model_hits += list((((logits > 0) == right)[: len(chunk)] & real).sum(1))
            constant_hits += list(((right == self.constant_label)[: len(chunk)] & real).sum(1))
            steps += list(real.sum(1))
        per_completion = np.stack([model_hits, constant_hits, steps], axis=1).astype(np.float64)
        by_prompt: dict[str, np.ndarray] = {}
        for prompt, row in zip(self.eval_prompts, per_completion, strict=True):
            by_prompt[prompt] = by_prompt.get(prompt, 0.0) + row
        model_c, constant_c, steps_c = np.array(list(by_prompt.values())).T
        margin = clustered_difference_interval(model_c, constant_c, steps_c)
        return {
            "eval/step_accuracy": float(model_c.sum() / steps_c.sum()),
            "eval/loss": float(np.average(losses, weights=weights)),
            "eval/constant_step_accuracy": float(constant_c.sum() / steps_c.sum()),
            "eval/margin_over_constant": margin.mean,
            "eval/margin_over_constant_low": margin.low,
            "eval/margin_over_constant_high": margin.high,
        }

    def summary(self) -> dict[str, Any]:
        """The label counts."""
        return {"labels": self.label_stats}


def save_process_reward_model(run: ProcessRewardModelRun, directory: str) -> None:
    """Writes the trained model (`save_scalar_head`) and the step separator it learned
    (`config.prm.marker`), which the RL stage's `config.rewards.step_marker` must repeat."""
    save_scalar_head(run, directory)
    write_step_marker(directory, run.config.prm.marker)


PROCESS_REWARD_MODEL = SupervisedStage(
    "process_reward_model", section="prm", validate=validate_prm_config, build=ProcessRewardModelRun,
    save=save_process_reward_model, output="process_reward_model", report=_report,
    desc=lambda config: "PRM",
)  # fmt: skip
