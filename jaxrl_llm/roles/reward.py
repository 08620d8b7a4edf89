"""The reward role: reward functions (threads, time limits), optionally plus a reward model (or
an ensemble), a process reward model, and constraint judges (their verdicts are reported as
`per_function["judge/<name>"]`: 1 violated, 0 not, NaN no verdict; they are not rewards).

Functions are scored by `jaxrl_llm.rewards.RewardRunner`. A reward model is a `ScalarHeadModel`
(a Transformer trunk with a scalar head, e.g. trained with a Bradley-Terry loss) scored in
batches on device at the last token of prompt + completion; its score joins the total with a
weight and is reported as `per_function["model"]` (and, when whitened, its scores before
whitening as `per_function["model_raw"]`). In a run its frozen weights are laid out on
the train mesh by the train rules and its rows split over the data axis, as the reference's are
(the layout `python -m jaxrl_llm.plan` compiles for the "reward_model" phase).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import jax
import numpy as np
from flax import nnx
from jax.sharding import Mesh

from jaxrl_llm.models.heads import ScalarHeadModel
from jaxrl_llm.models.partitioning import use_layout
from jaxrl_llm.models.precision import compute_params, merge_for_compute
from jaxrl_llm.rewards import RewardOutput, RewardRunner
from jaxrl_llm.rewards.ensemble import raw_scores
from jaxrl_llm.rewards.refinement import split_steps
from jaxrl_llm.roles.learner import place_batch, place_params
from jaxrl_llm.rollout.batching import pack_prompts
from jaxrl_llm.sharding import TRAIN_RULES, Rules, layout, param_shardings


def score_fn(graphdef):
    """A jitted `(params, tokens_bt, lengths_b) -> scores_b` of a scalar-head model's graph:
    float32 [B] scores read at each row's last real token (int32 [B, T] tokens, [B] lengths)."""

    def scores(params, tokens_bt, lengths_b):
        return merge_for_compute(graphdef, params).sequence_scores(tokens_bt, lengths_b)

    return jax.jit(scores)


class ModelReward:
    """Scores (prompt, completion) texts with a scalar-head model, `batch_size` rows at a time.

    Args:
      model: the reward model.
      tokenizer: its tokenizer (prompt text + completion text are encoded together).
      batch_size: rows per forward; the last batch is padded, so one program serves all.
      min_length_bucket: sequences are right-padded to a length bucket >= this.
      mesh: where the frozen weights live and the rows run (a run passes the train mesh: the
        weights sharded by `rules`, each batch's rows over the "data" axis); None: the default
        device, unsharded.
      rules: the layout on `mesh` (default `TRAIN_RULES`).
    """

    def __init__(
        self,
        model: ScalarHeadModel,
        tokenizer,
        *,
        batch_size: int = 16,
        min_length_bucket: int = 64,
        mesh: Mesh | None = None,
        rules: Rules = TRAIN_RULES,
    ):
        self.tokenizer, self.batch_size, self.min_length_bucket = (
            tokenizer,
            batch_size,
            min_length_bucket,
        )
        self.mesh, self.rules = mesh, rules
        self.graphdef, params = nnx.split(model, nnx.Param)
        params = compute_params(model, params)  # frozen: no master copy kept
        if mesh is not None:
            params = place_params(params, param_shardings(params, mesh, rules))
        self.params = params
        self._scores = score_fn(self.graphdef)

    def _score_batch(self, tokens_bt: np.ndarray, lengths_b: np.ndarray) -> np.ndarray:
        """float32 [B] scores of one padded batch, on `mesh` when one was given."""
        if self.mesh is None:
            return np.asarray(self._scores(self.params, tokens_bt, lengths_b))
        tokens_bt, lengths_b = place_batch((tokens_bt, lengths_b), self.mesh, self.rules)
        with use_layout(layout(self.mesh, self.rules)):
            return np.asarray(self._scores(self.params, tokens_bt, lengths_b))

    def __call__(self, prompts: Sequence[str], completions: Sequence[str]) -> np.ndarray:
        """float32 [B] scores."""
        texts = [p + c for p, c in zip(prompts, completions, strict=True)]
        ids = self.tokenizer.batch_encode(texts)
        out = []
        for start in range(0, len(ids), self.batch_size):
            packed = pack_prompts(
                ids[start : start + self.batch_size],
                pad_id=self.tokenizer.pad_token_id or 0,
                min_prompt_bucket=self.min_length_bucket,
                min_batch_bucket=self.batch_size,
            )
            scores = self._score_batch(packed.tokens, packed.lengths)
            out.append(scores[: packed.batch_size])
        return np.concatenate(out).astype(np.float32) if out else np.zeros((0,), np.float32)


class RewardRole:
    """Reward functions plus an optional weighted reward model; called like a `RewardRunner`.

    With a process model its summed step rewards join the total and `per_function` gets
    "process" and "process_steps" (steps per completion); without one, `step_marker` (set by
    `config.rewards.count_steps`) still logs "process_steps", counted by `split_steps`.

    Example:
      >>> rewards = RewardRole(RewardRunner({"task": task_reward}))
      >>> out = rewards(prompts, completions, examples)       # RewardOutput
    """

    def __init__(
        self,
        functions: RewardRunner,
        model: ModelReward | None = None,
        model_weight: float = 1.0,
        *,
        process=None,
        process_weight: float = 1.0,
        judges=None,
        step_marker: str | None = None,
    ):
        self.functions, self.model, self.model_weight = functions, model, model_weight
        self.process, self.process_weight = process, process_weight
        # without a process model, count each completion's steps on this marker (None: don't)
        self.step_marker = step_marker
        self.judges = judges  # a `jaxrl_llm.constraints.JudgeMixture`, or None

    @property
    def answer_rule(self) -> str:
        """The answer rule of its reward functions' "task" (`RewardRunner.answer_rule`)."""
        return self.functions.answer_rule

    def without_judges(self) -> RewardRole:
        """The same rewards without the judges (evaluation scores answers, not constraints)."""
        if self.judges is None:
            return self
        view = copy.copy(self)
        view.judges = None
        return view

    def __call__(self, prompts, completions, examples) -> RewardOutput:
        out = self.functions(prompts, completions, examples)
        total, per_function = out.total, dict(out.per_function)
        if self.model is not None:
            scores = self.model(prompts, completions)
            total = total + self.model_weight * scores
            per_function["model"] = scores
            raw = raw_scores(self.model)  # before whitening (None when not whitened)
            if raw is not None:
                per_function["model_raw"] = raw
        steps = None
        if self.process is not None:  # a `rewards.process.ProcessReward`
            scored = self.process.score(prompts, completions)
            total = total + self.process_weight * scored.totals
            per_function["process"] = scored.totals
            per_function["process_steps"] = np.array(
                [len(p) for p in scored.probabilities], np.float32
            )
            # weighted as they enter the total, for dense placement (`losses.step_token_rewards`)
            steps = scored.steps._replace(rewards=self.process_weight * scored.steps.rewards)
        elif self.step_marker is not None:  # the same count the process model would score
            per_function["process_steps"] = np.array(
                [len(split_steps(c, self.step_marker)) for c in completions], np.float32
            )
        if self.judges is not None:  # verdicts, not rewards: they never enter the total
            verdicts = self.judges(prompts, completions, examples)
            for name, row in zip(verdicts.names, verdicts.violations, strict=True):
                per_function[f"judge/{name}"] = row
        return RewardOutput(
            total=np.asarray(total, np.float32),
            per_function=per_function,
            num_errors=out.num_errors,
            num_timeouts=out.num_timeouts,
            steps=steps,
            num_skipped=out.num_skipped,
        )
