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
held-out step accuracy and loss before / during / after; written to
`<workdir>/process_reward_model`, which the RL stage takes as `--config.rewards.process_model`
(with `rewards.process_refinement` none / clip / delta, `jaxrl_llm.rewards.process`).
"""

from __future__ import annotations

import itertools
import json
import os
import time
from typing import Any, NamedTuple

import jax
import ml_collections
import numpy as np

from jaxrl_llm.data.jsonl import json_objects
from jaxrl_llm.data.presets import resolve_task, task_pool
from jaxrl_llm.losses.reward_model import step_cross_entropy
from jaxrl_llm.models.heads import ScalarHeadModel
from jaxrl_llm.models.precision import merge_for_compute
from jaxrl_llm.rewards.process import step_token_ends
from jaxrl_llm.rewards.refinement import split_steps
from jaxrl_llm.roles import place_batch
from jaxrl_llm.rollout.chat import chat_generator, completion_texts, prompt_ids
from jaxrl_llm.runners import components
from jaxrl_llm.runners.components import load_policy
from jaxrl_llm.runners.supervised import (
    check_sampled_labels_section,
    fit_scalar_model,
    padded_width,
    scalar_head_learner,
    split_by_group,
    stage_config,
    step_indices,
    write_config,
    write_summary,
)

LABELS = ("soft", "hard")


def prm_section() -> ml_collections.ConfigDict:
    """The `config.prm` fields."""
    c = ml_collections.ConfigDict()
    c.steps = ""  # a step-label JSONL; "" makes labels (<workdir>/steps.jsonl)
    c.num_prompts = 64  # task prompts sampled to make labels
    c.group_size = 4  # completions per prompt
    c.rollouts = 4  # Monte Carlo continuations per step prefix
    c.label = "soft"  # "soft": fraction of continuations right; "hard": any right
    c.marker = "\n"  # step separator
    c.temperature = 1.0
    c.max_new_tokens = 64
    c.batch_size = 8  # completions per optimizer update
    c.max_length = 256  # tokens of prompt + completion; longer ones are dropped (counted)
    c.eval_fraction = 0.2
    c.eval_every = 0
    return c


def prm_config() -> ml_collections.ConfigDict:
    """The default process reward-model configuration (SmolLM2-135M-Instruct, chain_sum)."""
    return stage_config("process_reward_model", "prm", prm_section())


def validate_prm_config(config: ml_collections.ConfigDict) -> None:
    """Raises ValueError naming the first bad field of a process reward-model config."""
    p = config.prm
    positive = ("num_prompts", "group_size", "rollouts", "max_new_tokens", "batch_size")
    check_sampled_labels_section(config, "prm", positive)
    if not isinstance(p.max_length, int) or p.max_length < 2:
        raise ValueError(f"config.prm.max_length={p.max_length!r} must be an integer >= 2.")
    if p.label not in LABELS:
        raise ValueError(f"config.prm.label={p.label!r} must be one of {LABELS}.")
    if not p.marker:
        raise ValueError("config.prm.marker must be a non-empty step separator, e.g. '\\n'.")
    if p.steps and not os.path.isfile(p.steps):
        raise ValueError(f"config.prm.steps={p.steps!r} does not exist ('' makes labels).")
    resolve_task(config.task.name, config.task.kwargs.to_dict())


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


def make_step_labels(config, policy, tokenizer, path: str) -> dict[str, float]:
    """Samples completions and labels their steps by Monte Carlo completion (module docstring);
    writes `path` and returns counts."""
    p, task = config.prm, config.task
    source = task_pool(task, side="train", seed=config.seed)
    examples = list(itertools.islice(iter(source), p.num_prompts))
    texts, ids = prompt_ids(
        tokenizer,
        examples,
        system_prompt=task.system_prompt,
        instruction_suffix=task.instruction_suffix,
    )
    generator = chat_generator(
        policy, tokenizer, max_new_tokens=p.max_new_tokens, temperature=p.temperature
    )
    rewards = components.build_rewards(config)

    def scores(prompts, completions, exs):
        return rewards(prompts, completions, exs).per_function["task"]

    owner = [i for i in range(len(examples)) for _ in range(p.group_size)]
    completions = []
    for start in range(0, len(owner), 64):  # at most 64 rows a decode
        rows = [ids[i] for i in owner[start : start + 64]]
        completions += completion_texts(tokenizer, generator(rows, seed=config.seed + start))
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
        continued = completion_texts(tokenizer, generator(batch, seed=seed))
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
    with open(path, "w", encoding="utf-8") as f:
        for record in records:
            f.write(json.dumps(record) + "\n")
    steps = [len(r["labels"]) for r in records]
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


class ProcessRewardModelRun:
    """One process reward-model run: labelled completions, the `Learner`, held-out evaluation."""

    def __init__(self, config, workdir: str):
        self.config, p = config, config.prm
        policy, self.tokenizer = load_policy(config)
        path = p.steps or os.path.join(workdir, "steps.jsonl")
        self.label_stats: dict[str, float] = {}
        if not p.steps and not os.path.isfile(path):
            self.label_stats = make_step_labels(config, policy, self.tokenizer, path)
            print(
                f"[jaxrl_llm] {self.label_stats['steps']} steps of "
                f"{self.label_stats['completions']} completions labelled "
                f"({self.label_stats['continuations']} continuations), written to {path}"
            )
        encoded, prompts, dropped = [], [], 0
        for item in read_step_labels(path, p.marker):
            ids, ends = step_token_ends(self.tokenizer, item.prompt, item.completion, p.marker)
            if len(ids) > p.max_length:
                dropped += 1
                continue
            encoded.append((ids, ends, item.labels))
            prompts.append(item.prompt)
        if len(set(prompts)) < 2:
            raise ValueError(
                f"{path}: usable completions of {len(set(prompts))} prompt(s) ({dropped} longer "
                f"than config.prm.max_length={p.max_length}); one prompt's are held out, so at "
                "least two are needed: sample more (config.prm.num_prompts)."
            )
        # held out by prompt: completions of one prompt never sit on both sides
        held, train = split_by_group(prompts, p.eval_fraction, config.seed)
        self.eval_items = [encoded[i] for i in held]
        self.train_items = [encoded[i] for i in train]
        self.width = padded_width([len(ids) for ids, _, _ in encoded], limit=p.max_length)
        self.max_steps = max(4, 1 << (max(len(e) for _, e, _ in encoded) - 1).bit_length())
        positive = np.mean([x >= 0.5 for _, _, labels in encoded for x in labels])
        self.label_stats.update(
            train=len(self.train_items),
            held_out=len(held),
            dropped=dropped,
            positive_step_fraction=float(positive),
        )
        self.pad_id = self.tokenizer.pad_token_id or 0
        self.model, self.learner = scalar_head_learner(policy, config, prm_loss)
        del policy
        graphdef = self.learner.graphdef
        self._loss_fn = jax.jit(lambda params, b: prm_loss(merge_for_compute(graphdef, params), b))

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
        """Held-out step accuracy (score > 0 against label >= 0.5) and loss."""
        del when
        size, weights, losses, accuracies = self.config.prm.batch_size, [], [], []
        for start in range(0, len(self.eval_items), size):
            chunk = self.eval_items[start : start + size]
            batch = self.step_batch(chunk + [chunk[0]] * (size - len(chunk)))
            mask = batch.mask.copy()
            mask[len(chunk) :] = False  # the filler rows do not count
            loss, metrics = self._loss(batch._replace(mask=mask))
            losses.append(float(loss))
            accuracies.append(float(metrics["accuracy"]))
            weights.append(float(mask.sum()))
        return {
            "eval/step_accuracy": float(np.average(accuracies, weights=weights)),
            "eval/loss": float(np.average(losses, weights=weights)),
        }

    def _loss(self, batch: StepBatch):
        return self._loss_fn(self.learner.params, batch)


def train_process_reward_model(config, workdir: str, *, progress: bool = True):
    """Runs (or resumes) the process reward-model stage; returns its summary (summary.json)."""
    validate_prm_config(config)
    write_config(config, workdir)
    start_time = time.time()
    run = ProcessRewardModelRun(config, workdir)
    before, after, directory = fit_scalar_model(
        run,
        config,
        workdir,
        name="process_reward_model",
        eval_every=config.prm.eval_every,
        desc="PRM",
        progress=progress,
    )
    summary = {
        "stage": "process_reward_model",
        "steps": config.train.num_steps,
        "labels": run.label_stats,
        "before": before,
        "after": after,
        "train_time_s": time.time() - start_time,
        "process_reward_model": directory,
    }
    write_summary(workdir, summary)
    print(
        f"[jaxrl_llm] process reward model held-out step accuracy "
        f"{100 * before['eval/step_accuracy']:.1f}% -> {100 * after['eval/step_accuracy']:.1f}% "
        f"(positive steps: {100 * run.label_stats['positive_step_fraction']:.1f}%), "
        f"written to {directory}"
    )
    return summary
