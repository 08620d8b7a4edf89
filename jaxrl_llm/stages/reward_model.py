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
import time
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from jaxrl_llm.data.pairs import Pair, read_pairs_jsonl, write_pairs_jsonl
from jaxrl_llm.data.presets import task_pool
from jaxrl_llm.losses.reward_model import bradley_terry
from jaxrl_llm.models.heads import ScalarHeadModel
from jaxrl_llm.models.precision import merge_for_compute
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
from jaxrl_llm.stages.sampling import sample_groups
from jaxrl_llm.stages.supervised import SupervisedStage, save_scalar_head, train_stage

# The positive integers of a section that makes pairs and trains on them (`rm`, `preference`).
PAIR_SECTION_FIELDS = (
    "num_prompts",
    "group_size",
    "pairs_per_prompt",
    "max_new_tokens",
    "batch_size",
    "max_length",
)


def pair_fields(c: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """`c` with the fields of a stage that makes comparison pairs from the policy's samples
    and trains on them (`rm`, `preference`): `sampled_labels_fields` with the pair file
    `pairs` and `pairs_per_prompt`."""
    c = sampled_labels_fields(c, labels="pairs", num_prompts=256, group_size=8)
    c.pairs_per_prompt = 4  # distinct (correct, incorrect) pairs kept per prompt (InstructGPT: all)
    return c


def rm_section() -> ml_collections.ConfigDict:
    """The `config.rm` fields."""
    return pair_fields(ml_collections.ConfigDict())


def rm_config() -> ml_collections.ConfigDict:
    """The default outcome reward-model configuration (SmolLM2-135M-Instruct, chain_sum)."""
    return stage_config("reward_model", "rm", rm_section())


def validate_rm_config(config: ml_collections.ConfigDict) -> None:
    """Raises ValueError naming the first bad field of a reward-model config, and the fix."""
    check_sampled_labels_section(config, "rm", PAIR_SECTION_FIELDS, labels="pairs")


def train_reward_model(config: ml_collections.ConfigDict, workdir: str, *, progress: bool = True):
    """Runs (or resumes) the reward-model stage; returns its summary (also summary.json)."""
    return train_stage(REWARD_MODEL, config, workdir, progress=progress)


def _report(summary: dict[str, Any]) -> str:
    change = percent_change(summary, "eval/pair_accuracy")
    return (
        f"[jaxrl_llm] reward model held-out pair accuracy {change} (chance 50%), written to "
        f"{summary['reward_model']}"
    )


def make_pairs(
    config, policy, tokenizer, path: str, journal: str | None = None, *, section: str = "rm"
) -> dict[str, float]:
    """Samples, scores and pairs completions of the task's training prompts (see the module
    docstring); writes them to `path`, says so, and returns counts. `config.<section>` has the sampling
    fields (num_prompts, group_size, pairs_per_prompt, temperature, max_new_tokens): the
    reward-model stage's `rm`, the offline preference stage's `preference`. `journal` keeps the
    decode calls for a rerun of a killed pass (`sampling.task_sampler`)."""
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
        journal=journal,
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
    print(f"[jaxrl_llm] {len(pairs)} pairs from {len(examples)} prompts written to {path}")
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
    """One reward-model run: the pairs (encoded), the `Learner` and the held-out evaluation
    (a `StageRun`)."""

    def __init__(self, config, workdir: str):
        self.config = config
        policy, self.tokenizer = load_policy(config)
        split, self.pair_stats = labelled_items(
            config, "rm", "pairs", workdir,
            make=lambda path, journal: make_pairs(config, policy, self.tokenizer, path, journal),
            read=read_pairs_jsonl, encode=self._encode,
        )  # fmt: skip
        self.eval_pairs, self.train_pairs = split.items(split.held), split.items(split.train)
        self.width = split.width
        self.pair_stats.update(
            train_pairs=len(split.train),
            eval_pairs=len(split.held),
            eval_prompts=len(set(split.prompts[i] for i in split.held)),
            dropped=split.dropped,
        )
        self.pad_id = self.tokenizer.pad_token_id or 0
        self.model, self.learner = scalar_head_learner(policy, config, rm_loss)
        graphdef = self.learner.graphdef
        self._score_fn = jax.jit(
            lambda p, t, n: merge_for_compute(graphdef, p).sequence_scores(t, n)
        )

    def _encode(self, pair: Pair):
        """(prompt, (chosen ids, rejected ids, margin), both id lists)."""
        chosen = self.tokenizer.encode(pair.prompt + pair.chosen)
        rejected = self.tokenizer.encode(pair.prompt + pair.rejected)
        return pair.prompt, (chosen, rejected, pair.margin), (chosen, rejected)

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

    def summary(self) -> dict[str, Any]:
        """The pair counts and the chance pair accuracy."""
        return {"pairs": self.pair_stats, "chance_pair_accuracy": 0.5}


REWARD_MODEL = SupervisedStage(
    "reward_model", section="rm", validate=validate_rm_config, build=RewardModelRun,
    save=save_scalar_head, output="reward_model", report=_report,
    desc=lambda config: "RM",
)  # fmt: skip
