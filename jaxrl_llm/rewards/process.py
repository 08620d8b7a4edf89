"""A process reward model as a reward: per-step scores of a completion, refined, summed or
placed on each step's last token.

    prm = ProcessReward(load_scalar_model("runs/prm/process_reward_model"), tokenizer,
                        refinement="clip", eta=0.5)
    rewards_b = prm(prompt_texts, completions)       # float32 [B]; prm.last_steps: steps [B]
    scores = prm.score(prompt_texts, completions)    # the same totals, and the steps themselves

Each completion is split into steps (`refinement.split_steps`, on `marker`); the model scores
the prefix ending at each step's last token (`ScalarHeadModel.scores_at`), as the probability
that the step is on a path to the right answer (sigmoid of the score, the Math-Shepherd
target). The step rewards are refined (`refinement.refine_rewards`: none, Clip or Delta, Gao et
al. 2024, 2410.15115) and summed into the completion's reward, so the RL stage's return is the
sum the paper bounds: unrefined, it grows with every extra good-looking step.

Placement (`config.rewards.process_placement`, `PLACEMENTS`): "summed" adds the sum to the
completion's reward, the form every algorithm takes; "dense" also hands each step's refined
reward and where its step ends (`StepRewards`) to an algorithm with a critic, which puts it on
the step's last token and the rest of the reward (the success reward) on the final token
(`losses.step_token_rewards`, PPO's GAE), as Gao et al. do. A completion without the marker is
one step ending at its last token, as `split_steps` makes it and as the PRM stage labels it (a
one-line answer is a legitimate trajectory; refusing it would stop a run on a sample the policy
is free to draw); an empty completion has no step and earns only its success reward.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxrl_llm.models.precision import merge_for_compute
from jaxrl_llm.rewards.refinement import REFINEMENTS, refine_rewards, split_steps
from jaxrl_llm.rollout.batching import bucket_size

# How the process reward enters RL (`config.rewards.process_placement`, module docstring).
PLACEMENTS = ("summed", "dense")
# A step reward is a probability (sigmoid of the model's score); Clip's eta must lie in
# (low, high]: at eta <= 0 every clipped reward is 0 (the PRM is silenced), above 1 every step
# is charged whatever its score.
STEP_REWARD_RANGE = (0.0, 1.0)
# Beside a process reward model's weights: the step separator its labels were split on
# (`write_step_marker`), which the RL stage's `rewards.step_marker` must repeat.
STEP_MARKER_FILE = "step_marker.json"


def check_eta(eta: float, *, field: str = "eta") -> None:
    """Raises ValueError unless Clip's threshold lies in the step rewards' range (0, 1].

    Example:
      >>> check_eta(1.5, field="config.rewards.process_eta")
      ValueError: config.rewards.process_eta=1.5 is outside the process reward's range (0, 1] ...
    """
    low, high = STEP_REWARD_RANGE
    if not low < eta <= high:
        raise ValueError(
            f"{field}={eta} is outside the process reward's range ({low:g}, {high:g}] (step "
            f"rewards are probabilities; Clip's min(p - eta, 0) is 0 everywhere at eta <= {low:g} "
            f"and charges every step above {high:g}): set it in ({low:g}, {high:g}], e.g. 0.5."
        )


def write_step_marker(directory: str, marker: str) -> None:
    """Records in `directory` (a process reward model's) the separator its steps were split on."""
    with open(os.path.join(directory, STEP_MARKER_FILE), "w") as f:
        json.dump({"marker": marker}, f)


def check_step_marker(directory: str, marker: str, *, field: str = "marker") -> None:
    """Raises ValueError if the process reward model in `directory` learned steps split on
    another separator than `marker`.

    Steps split on another separator end on tokens the model never learned to score as step
    ends; with one the policy never writes, every completion is a single step and the PRM an
    outcome model. A model written before its stage recorded the marker is not checked.

    Example:
      >>> check_step_marker("runs/prm/process_reward_model", "\\n\\n",
      ...                   field="config.rewards.step_marker")
      ValueError: config.rewards.step_marker='\\n\\n' splits steps on another separator ...
    """
    path = os.path.join(directory, STEP_MARKER_FILE)
    if not os.path.isfile(path):
        return
    try:
        with open(path) as f:
            trained = json.load(f)["marker"]
    except (json.JSONDecodeError, KeyError, TypeError) as error:
        raise ValueError(
            f"{path} is not a step-marker record ({error!r}): it should read "
            '{"marker": "\\n"}; rewrite it with the separator of the stage that trained the '
            "model (its config.prm.marker)."
        ) from error
    if marker != trained:
        raise ValueError(
            f"{field}={marker!r} splits steps on another separator than the process reward "
            f"model in {directory!r} was trained on ({trained!r}, its {STEP_MARKER_FILE}): "
            f"set {field}={trained!r}."
        )


class StepRewards(NamedTuple):
    """The scored steps of a batch of completions, padded to S steps.

    Attributes:
      rewards: float32 [B, S] refined step rewards (times the reward role's process weight
        once it hands them on: as they enter the total); 0 at padding.
      ends: int32 [B, S] where each step ends in its completion's text (a character offset,
        exclusive); -1 at padding.
    """

    rewards: np.ndarray
    ends: np.ndarray


class ProcessScores(NamedTuple):
    """What `ProcessReward.score` returns.

    Attributes:
      totals: float32 [B] summed refined step rewards (the completion's process reward).
      steps: `StepRewards` of the scored steps (a step cut by `max_length` is not scored).
      probabilities: each completion's step probabilities, float32 [K_b].
    """

    totals: np.ndarray
    steps: StepRewards
    probabilities: list[np.ndarray]


def step_token_ends(
    tokenizer, prompt: str, completion: str, marker: str = "\n"
) -> tuple[list[int], list[int]]:
    """Token ids of prompt + completion and the index of each completion step's last token.

    Example:
      >>> ids, ends = step_token_ends(tokenizer, prompt, "3 + 4 = 7\\nSo 14.")
      >>> [tokenizer.decode(ids[: e + 1])[-3:] for e in ends]     # ['= 7\\n'[-3:], ...]
    """
    encoding = tokenizer.backend.encode(prompt + completion, add_special_tokens=False)
    starts = np.array([start for start, _ in encoding.offsets])
    ends = []
    for _, end in split_steps(completion, marker):
        # the last token that starts before the step's end
        ends.append(int(np.searchsorted(starts, len(prompt) + end, side="left")) - 1)
    return list(encoding.ids), ends


class ProcessReward:
    """Scores completions with a process reward model (see the module docstring).

    Args:
      model: a `ScalarHeadModel` trained on step labels.
      tokenizer: the policy's tokenizer.
      refinement: "none", "clip" or "delta".
      eta: Clip's threshold (step rewards are min(p - eta, 0)).
      marker: the step separator.
      batch_size, max_length: rows per forward and their greatest width (rows are padded to
        the longest one's length bucket; longer texts are cut: their later steps are not
        scored).
    """

    def __init__(
        self,
        model,
        tokenizer,
        *,
        refinement: str = "none",
        eta: float = 0.5,
        marker: str = "\n",
        batch_size: int = 16,
        max_length: int = 512,
    ):
        if refinement not in REFINEMENTS:
            raise ValueError(f"ProcessReward: refinement={refinement!r} not in {REFINEMENTS}.")
        if refinement == "clip":
            check_eta(eta, field="ProcessReward: eta")
        self.tokenizer, self.refinement, self.eta, self.marker = tokenizer, refinement, eta, marker
        self.batch_size, self.max_length = batch_size, max_length
        graphdef, self.params = nnx.split(model, nnx.Param)

        def step_probabilities(params, tokens_bt, ends_bs, mask_bs):
            logits = merge_for_compute(graphdef, params).scores_at(tokens_bt, ends_bs)
            probs = jnp.where(mask_bs, jax.nn.sigmoid(logits), 0.0)
            return probs, refine_rewards(probs, mask_bs, refinement=refinement, eta=eta)

        self._score = jax.jit(step_probabilities)
        self.last_steps = np.zeros((0,), np.int32)  # steps per completion of the last call
        self.last_step_probabilities: list[np.ndarray] = []

    def __call__(self, prompts: Sequence[str], completions: Sequence[str]) -> np.ndarray:
        """float32 [B] summed refined step rewards (0 for a completion without steps)."""
        scores = self.score(prompts, completions)
        self.last_steps = np.array([len(p) for p in scores.probabilities], np.int32)
        self.last_step_probabilities = scores.probabilities
        return scores.totals

    def score(self, prompts: Sequence[str], completions: Sequence[str]) -> ProcessScores:
        """The summed process rewards [B] and the steps they sum (`ProcessScores`); no state."""
        rows = [
            step_token_ends(self.tokenizer, p, c, self.marker)
            for p, c in zip(prompts, completions, strict=True)
        ]
        # the longest row's length bucket (>= 64), not max_length: 100-token chain_sum rows
        # padded to 512 made scoring 32 completions take 16 s of a 30 s GRPO step
        longest = max([len(ids) for ids, _ in rows] + [1])
        width = min(self.max_length, bucket_size(longest, minimum=64))
        # steps per row, rounded up to a power of two >= 4 (few compiled shapes)
        most = max(4, 1 << (max([len(e) for _, e in rows] + [1]) - 1).bit_length())
        totals, probabilities, step_rewards = [], [], []
        pad = self.tokenizer.pad_token_id or 0
        for start in range(0, len(rows), self.batch_size):
            chunk = rows[start : start + self.batch_size]
            n = self.batch_size
            tokens = np.full((n, width), pad, np.int32)
            ends = np.zeros((n, most), np.int32)
            mask = np.zeros((n, most), bool)
            for b, (ids, step_ends) in enumerate(chunk):
                ids = ids[:width]
                tokens[b, : len(ids)] = ids
                kept = [e for e in step_ends if e < width]
                ends[b, : len(kept)] = kept
                mask[b, : len(kept)] = True
            probs, refined = self._score(self.params, tokens, ends, mask)
            probs, refined = np.asarray(probs), np.asarray(refined)
            for b in range(len(chunk)):
                totals.append(float(refined[b].sum()))
                probabilities.append(probs[b][mask[b]])
                step_rewards.append(refined[b][mask[b]])
        steps = StepRewards(
            rewards=np.zeros((len(rows), most), np.float32),
            ends=np.full((len(rows), most), -1, np.int32),
        )
        for b, (completion, kept) in enumerate(zip(completions, step_rewards, strict=True)):
            spans = split_steps(completion, self.marker)[: len(kept)]  # the scored steps
            steps.rewards[b, : len(kept)] = kept
            steps.ends[b, : len(kept)] = [end for _, end in spans]
        return ProcessScores(np.asarray(totals, np.float32), steps, probabilities)


def step_token_columns(tokenizer, rollout, ends_bs: np.ndarray) -> np.ndarray:
    """int32 [B, S]: the rollout column of the token on which each step ends (-1 at padding).

    A step ending at character e of a completion's text (`completion_texts`: the completion
    tokens decoded without special tokens) ends on the first completion token whose decoded
    prefix reaches e; its column is the row's prompt length plus that token's index.

    Args:
      tokenizer: the policy's tokenizer (`batch_decode`).
      rollout: the `Rollout` (numpy) whose completions the steps split.
      ends_bs: int [B, S] character ends of the steps (`StepRewards.ends`), < 0 at padding.

    Example:
      >>> cols = step_token_columns(tokenizer, rollout, scores.steps.ends)
      >>> tokenizer.decode(rollout.tokens[0, p_0 : cols[0, 0] + 1])      # '3 + 4 = 7\n'
    """
    ends_bs = np.asarray(ends_bs)
    completions = rollout.completions()
    if len(completions) != ends_bs.shape[0]:
        raise ValueError(
            f"step_token_columns: {ends_bs.shape[0]} rows of steps for {len(completions)} "
            "completions; the steps must be scored on the rollout's rows, in order."
        )
    prompt_lengths = np.asarray(rollout.prompt_lengths)
    columns = np.full(ends_bs.shape, -1, np.int32)
    for b, ids in enumerate(completions):
        wanted = ends_bs[b][ends_bs[b] >= 0]
        if not len(wanted) or not ids:
            continue
        prefixes = tokenizer.batch_decode(
            [ids[: i + 1] for i in range(len(ids))], skip_special_tokens=True
        )
        # a prefix cut inside a multi-byte character can decode longer than the next one
        reach = np.maximum.accumulate([len(text) for text in prefixes])
        index = np.minimum(np.searchsorted(reach, wanted, side="left"), len(ids) - 1)
        columns[b, : len(wanted)] = prompt_lengths[b] + index
    return columns


def dense_step_rewards(tokenizer, rollout, steps: StepRewards | None):
    """(rewards float32 [B, S], columns int32 [B, S]) of the steps of a scored rollout: what an
    algorithm with dense process rewards takes (`Experience.step_rewards` / `step_columns`).

    Raises:
      ValueError: no process reward model scored the batch (`steps` is None).
    """
    if steps is None:
        raise ValueError(
            "config.rewards.process_placement='dense' places a process reward model's step "
            "rewards, but none scored this batch: set config.rewards.process_model, or "
            "process_placement='summed'."
        )
    columns = step_token_columns(tokenizer, rollout, steps.ends)
    return np.asarray(steps.rewards, np.float32), columns
