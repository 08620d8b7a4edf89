"""The outcome reward-model stage: comparison pairs from the policy's own samples, then a scalar
head on the policy's trunk trained with the Bradley-Terry loss.

    python -m jaxrl_llm.main --config experiments/configs/rm_smollm2.py --workdir runs/rm \
        --config.model.name=runs/sft/model

Stage two of InstructGPT's pipeline ("Training language models to follow instructions with
human feedback", 2203.02155), with pairs made offline instead of by labellers: for each of
`rm.num_prompts` task prompts the policy samples `rm.group_size` completions, the task's verifier
scores them, and a prompt with a correct and an incorrect completion gives the pair (correct
preferred). They are written to `<workdir>/pairs.jsonl` (`jaxrl_llm.data.pairs`), so any pair
file in that format can be given instead (`rm.pairs`).

The reward model starts from the policy's weights with a fresh head (`ScalarHeadModel`) and
scores prompt + completion at its last token, exactly as the RL stage's reward role reads it
(`roles.reward.ModelReward`). Held-out pairwise accuracy (chance: 50%) and loss are logged before,
every `rm.eval_every` steps and after; the model is written to `<workdir>/reward_model`, which
the RL stage takes as `--config.rewards.model=<workdir>/reward_model`.
"""

from __future__ import annotations

import itertools
import os
import time
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from jaxrl_llm.data.pairs import Pair, read_pairs_jsonl, write_pairs_jsonl
from jaxrl_llm.data.presets import resolve_task, task_pool
from jaxrl_llm.losses.reward_model import bradley_terry
from jaxrl_llm.models.heads import ScalarHeadModel
from jaxrl_llm.models.precision import merge_for_compute
from jaxrl_llm.roles import place_batch
from jaxrl_llm.runners.components import load_policy
from jaxrl_llm.runners.supervised import (
    check_sampled_labels_section,
    fit_scalar_model,
    padded_width,
    sample_groups,
    scalar_head_learner,
    split_by_group,
    stage_config,
    step_indices,
    write_config,
    write_summary,
)

# The positive integers of a section that makes pairs and trains on them (`rm`, `preference`).
PAIR_SECTION_FIELDS = (
    "num_prompts",
    "group_size",
    "pairs_per_prompt",
    "max_new_tokens",
    "batch_size",
    "max_length",
)


def rm_section() -> ml_collections.ConfigDict:
    """The `config.rm` fields."""
    c = ml_collections.ConfigDict()
    c.pairs = ""  # a pair JSONL; "" makes pairs from the policy's samples (<workdir>/pairs.jsonl)
    c.num_prompts = 256  # task prompts sampled to make pairs
    c.group_size = 8  # completions per prompt
    c.pairs_per_prompt = 4  # distinct (correct, incorrect) pairs kept per prompt (InstructGPT: all)
    c.temperature = 1.0
    c.max_new_tokens = 64
    c.batch_size = 8  # pairs per optimizer update
    c.max_length = 256  # tokens of prompt + completion; longer pairs are dropped (counted)
    c.eval_fraction = 0.2  # pairs held out for pairwise accuracy
    c.eval_every = 0  # steps between held-out evaluations (0: before and after only)
    return c


def rm_config() -> ml_collections.ConfigDict:
    """The default outcome reward-model configuration (SmolLM2-135M-Instruct, chain_sum)."""
    return stage_config("reward_model", "rm", rm_section())


def validate_rm_config(config: ml_collections.ConfigDict) -> None:
    """Raises ValueError naming the first bad field of a reward-model config, and the fix."""
    r = config.rm
    check_sampled_labels_section(config, "rm", PAIR_SECTION_FIELDS)
    if r.pairs and not os.path.isfile(r.pairs):
        raise ValueError(f"config.rm.pairs={r.pairs!r} does not exist ('' makes pairs).")
    resolve_task(config.task.name, config.task.kwargs.to_dict())


def make_pairs(config, policy, tokenizer, path: str, *, section: str = "rm") -> dict[str, float]:
    """Samples, scores and pairs completions of the task's training prompts (see the module
    docstring); writes them to `path` and returns counts. `config.<section>` has the sampling
    fields (num_prompts, group_size, pairs_per_prompt, temperature, max_new_tokens): the
    reward-model stage's `rm`, the offline preference stage's `preference`."""
    r, task = config[section], config.task
    start = time.time()
    source = task_pool(task, side="train", seed=config.seed)
    examples = list(itertools.islice(iter(source), r.num_prompts))
    texts, completions, scores = sample_groups(
        config,
        policy,
        tokenizer,
        examples,
        group_size=r.group_size,
        max_new_tokens=r.max_new_tokens,
        temperature=r.temperature,
    )
    pairs, correct_fraction = [], []
    for i in range(len(examples)):
        group_scores, group_completions = scores[i], completions[i]
        correct_fraction.append(float(np.mean(group_scores >= 1.0)))
        scored = list(zip(group_completions, group_scores, strict=True))
        right = _distinct(c for c, s in scored if s >= 1.0)
        wrong = _distinct(c for c, s in scored if s <= 0.0)
        meta = {"task": examples[i].source, "answer": examples[i].answer}
        for a, b in spread_pairs(len(right), len(wrong), r.pairs_per_prompt):
            pairs.append(Pair(texts[i], right[a], wrong[b], meta=dict(meta)))
    write_pairs_jsonl(path, pairs)
    return {
        "prompts": len(examples),
        "pairs": len(pairs),
        "sample_accuracy": float(np.mean(correct_fraction)) if correct_fraction else 0.0,
        "seconds": time.time() - start,
    }


def _distinct(completions) -> list[str]:
    """The non-empty completions, each text once, in their order."""
    return list(dict.fromkeys(c for c in completions if c.strip()))


def spread_pairs(rights: int, wrongs: int, most: int) -> list[tuple[int, int]]:
    """Up to `most` (right, wrong) index pairs, spread over both lists before any repeats.

    Example:
      >>> spread_pairs(2, 3, 4)
      [(0, 0), (0, 1), (1, 0), (1, 1)]
    """
    combos = itertools.product(range(rights), range(wrongs))
    return sorted(combos, key=lambda ij: (max(ij), ij))[:most]


class PairBatch(NamedTuple):
    """B pairs as 2B rows: chosen rows first, then rejected rows.

    Attributes:
      tokens: int32 [2B, W]; lengths: int32 [2B]; margin: float32 [B].
    """

    tokens: Any
    lengths: Any
    margin: Any


def pair_batch(encoded: list[tuple[list[int], list[int], float]], *, width: int, pad_id: int):
    """A `PairBatch` (numpy) of encoded pairs (chosen ids, rejected ids, margin)."""
    rows = [c for c, _, _ in encoded] + [r for _, r, _ in encoded]
    tokens = np.full((len(rows), width), pad_id, np.int32)
    for b, ids in enumerate(rows):
        tokens[b, : len(ids)] = ids
    lengths = np.array([len(ids) for ids in rows], np.int32)
    margin = np.array([m for _, _, m in encoded], np.float32)
    return PairBatch(tokens, lengths, margin)


def rm_loss(model: ScalarHeadModel, batch: PairBatch, *, remat: bool | str = False):
    """Bradley-Terry loss of a `PairBatch` (scores at each row's last token); `remat` is the
    trunk's gradient checkpointing (`config.train.remat`)."""
    scores = model.sequence_scores(batch.tokens, batch.lengths, remat=remat)
    half = batch.margin.shape[0]
    return bradley_terry(scores[:half], scores[half:], margin_b=batch.margin)


class RewardModelRun:
    """One reward-model run: the pairs (encoded), the `Learner` and the held-out evaluation."""

    def __init__(self, config, workdir: str):
        self.config, r = config, config.rm
        policy, self.tokenizer = load_policy(config)
        path = r.pairs or os.path.join(workdir, "pairs.jsonl")
        self.pair_stats: dict[str, float] = {}
        if not r.pairs and not os.path.isfile(path):
            self.pair_stats = make_pairs(config, policy, self.tokenizer, path)
            print(
                f"[jaxrl_llm] {self.pair_stats['pairs']} pairs from "
                f"{self.pair_stats['prompts']} prompts written to {path}"
            )
        pairs = read_pairs_jsonl(path)
        encoded, prompts, dropped = self._encode(pairs)
        if len(set(prompts)) < 2:
            raise ValueError(
                f"{path}: usable pairs of {len(set(prompts))} prompt(s) ({dropped} pairs longer "
                f"than config.rm.max_length={r.max_length}); a reward model needs pairs of at "
                "least two prompts (one is held out). Sample more prompts (config.rm.num_prompts) "
                "or give a pair file (config.rm.pairs)."
            )
        # held out by prompt: pairs of one prompt never sit on both sides
        held, train = split_by_group(prompts, r.eval_fraction, config.seed)
        self.eval_pairs = [encoded[i] for i in held]
        self.train_pairs = [encoded[i] for i in train]
        self.width = padded_width(
            [len(ids) for pair in encoded for ids in pair[:2]], limit=r.max_length
        )
        self.pair_stats.update(
            train_pairs=len(train),
            eval_pairs=len(held),
            eval_prompts=len(set(prompts[i] for i in held)),
            dropped=dropped,
        )
        self.pad_id = self.tokenizer.pad_token_id or 0
        self.model, self.learner = scalar_head_learner(policy, config, rm_loss)
        del policy
        graphdef = self.learner.graphdef
        self._score_fn = jax.jit(
            lambda p, t, n: merge_for_compute(graphdef, p).sequence_scores(t, n)
        )

    def _encode(self, pairs: list[Pair]):
        """(encoded (chosen ids, rejected ids, margin), their prompts, pairs dropped as long)."""
        encoded, prompts, dropped = [], [], 0
        for pair in pairs:
            chosen = self.tokenizer.encode(pair.prompt + pair.chosen)
            rejected = self.tokenizer.encode(pair.prompt + pair.rejected)
            if max(len(chosen), len(rejected)) > self.config.rm.max_length:
                dropped += 1
                continue
            encoded.append((chosen, rejected, pair.margin))
            prompts.append(pair.prompt)
        return encoded, prompts, dropped

    def batch(self, step: int):
        """Step `step`'s pairs (epochs of a seeded permutation), placed."""
        size = self.config.rm.batch_size
        indices = step_indices(self.config.seed, step, size, len(self.train_pairs))
        chosen = [self.train_pairs[i] for i in indices]
        batch = pair_batch(chosen, width=self.width, pad_id=self.pad_id)
        return place_batch(batch, self.learner.mesh, self.learner.rules)

    def evaluate(self, when: str) -> dict[str, float]:
        """Held-out pairwise accuracy and loss (every held-out pair once)."""
        del when
        size, weights, losses, accuracies = self.config.rm.batch_size, [], [], []
        for start in range(0, len(self.eval_pairs), size):
            chunk = self.eval_pairs[start : start + size]
            real = len(chunk)
            chunk = chunk + [chunk[0]] * (size - real)  # one compiled shape
            batch = pair_batch(chunk, width=self.width, pad_id=self.pad_id)
            scores = self._scores(batch)
            chosen, rejected = scores[:size][:real], scores[size:][:real]
            accuracies.append(float(np.mean(np.where(chosen == rejected, 0.5, chosen > rejected))))
            losses.append(float(np.mean(-jax.nn.log_sigmoid(chosen - rejected))))
            weights.append(real)
        return {
            "eval/pair_accuracy": float(np.average(accuracies, weights=weights)),
            "eval/loss": float(np.average(losses, weights=weights)),
        }

    def _scores(self, batch: PairBatch) -> np.ndarray:
        return np.asarray(
            self._score_fn(self.learner.params, jnp.asarray(batch.tokens), batch.lengths)
        )


def train_reward_model(config: ml_collections.ConfigDict, workdir: str, *, progress: bool = True):
    """Runs (or resumes) the reward-model stage; returns its summary (also summary.json)."""
    validate_rm_config(config)
    write_config(config, workdir)
    start_time = time.time()
    run = RewardModelRun(config, workdir)
    before, after, directory = fit_scalar_model(
        run,
        config,
        workdir,
        name="reward_model",
        eval_every=config.rm.eval_every,
        desc="RM",
        progress=progress,
    )
    summary = {
        "stage": "reward_model",
        "steps": config.train.num_steps,
        "pairs": run.pair_stats,
        "before": before,
        "after": after,
        "chance_pair_accuracy": 0.5,
        "train_time_s": time.time() - start_time,
        "reward_model": directory,
    }
    write_summary(workdir, summary)
    print(
        f"[jaxrl_llm] reward model held-out pair accuracy {100 * before['eval/pair_accuracy']:.1f}%"
        f" -> {100 * after['eval/pair_accuracy']:.1f}% (chance 50%), written to {directory}"
    )
    return summary
