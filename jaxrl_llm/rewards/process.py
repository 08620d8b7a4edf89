"""A process reward model as a reward: per-step scores of a completion, refined, summed.

    prm = ProcessReward(load_scalar_model("runs/prm/process_reward_model"), tokenizer,
                        refinement="clip", eta=0.5)
    rewards_b = prm(prompt_texts, completions)       # float32 [B]; prm.last_steps: steps [B]

Each completion is split into steps (`refinement.split_steps`, on `marker`); the model scores
the prefix ending at each step's last token (`ScalarHeadModel.scores_at`), as the probability
that the step is on a path to the right answer (sigmoid of the score, the Math-Shepherd
target). The step rewards are refined (`refinement.refine_rewards`: none, Clip or Delta, Gao et
al. 2024, 2410.15115) and summed into the completion's reward, so the RL stage's return is the
sum the paper bounds: unrefined, it grows with every extra good-looking step.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxrl_llm.rewards.refinement import REFINEMENTS, refine_rewards, split_steps
from jaxrl_llm.rollout.batching import bucket_size


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
        self.tokenizer, self.refinement, self.eta, self.marker = tokenizer, refinement, eta, marker
        self.batch_size, self.max_length = batch_size, max_length
        graphdef, self.params = nnx.split(model, nnx.Param)

        def step_probabilities(params, tokens_bt, ends_bs, mask_bs):
            logits = nnx.merge(graphdef, params).scores_at(tokens_bt, ends_bs)
            probs = jnp.where(mask_bs, jax.nn.sigmoid(logits), 0.0)
            return probs, refine_rewards(probs, mask_bs, refinement=refinement, eta=eta)

        self._score = jax.jit(step_probabilities)
        self.last_steps = np.zeros((0,), np.int32)  # steps per completion of the last call
        self.last_step_probabilities: list[np.ndarray] = []

    def __call__(self, prompts: Sequence[str], completions: Sequence[str]) -> np.ndarray:
        """float32 [B] summed refined step rewards (0 for a completion without steps)."""
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
        totals, probabilities = [], []
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
        self.last_steps = np.array([len(p) for p in probabilities], np.int32)
        self.last_step_probabilities = probabilities
        return np.asarray(totals, np.float32)
