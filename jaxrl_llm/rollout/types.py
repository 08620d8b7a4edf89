"""What a rollout returns: `Rollout` and the `FinishReason` codes.

Layout (B prompts, P the prompt bucket length, N = max_new_tokens, T = P + N):

  position     0 .. p_b-1        p_b .. p_b+n_b-1        p_b+n_b .. T-1
  tokens       prompt b          completion b            pad_id
  completion   False             True                    False
  logprobs     0                 log q(token | prefix)    0

Each row's prompt is left-aligned at position 0 and its completion follows it directly, so
`tokens[b, :p_b + n_b]` is the exact sequence the model saw and `logprobs[b, t]` is the log-prob of
`tokens[b, t]` given `tokens[b, :t]`: a trainer's teacher-forced forward over `tokens` lines up
with it position by position (its log-prob of token t comes from the logits at t - 1). A completion
that ends on an EOS id or a stop sequence includes those tokens (the policy chose them).
"""

from __future__ import annotations

import enum
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

Array = jax.Array


class FinishReason(enum.IntEnum):
    """Why a completion ended (values of `Rollout.finish_reason`)."""

    LENGTH = 0  # produced max_new_tokens without meeting a stop condition
    EOS = 1  # produced one of the EOS ids (included in the completion)
    STOP = 2  # ended with one of the stop sequences (included in the completion)


FINISH_REASON_NAMES = tuple(reason.name.lower() for reason in FinishReason)


class Rollout(NamedTuple):
    """A batch of prompts with their sampled completions, in one [B, T] layout (see module doc).

    Attributes:
      tokens: int32 [B, T], T = prompt bucket + max_new_tokens; prompt, completion, then pad_id.
      completion_mask: bool [B, T], True exactly at the completion tokens.
      logprobs: float32 [B, T], log-prob of each completion token under the distribution that
        was sampled (logits / temperature, then top-k, top-p, min-p, renormalised); 0 for greedy
        rows (a point mass) and outside the completion.
      raw_logprobs: float32 [B, T], log-prob of the same tokens under the untempered, unfiltered
        policy `log_softmax(logits)` (what the trainer computes); 0 outside the completion.
      prompt_lengths: int32 [B], p_b.
      lengths: int32 [B], completion lengths n_b (1 <= n_b <= max_new_tokens).
      finish_reason: int32 [B], `FinishReason` values.
    """

    tokens: Array
    completion_mask: Array
    logprobs: Array
    raw_logprobs: Array
    prompt_lengths: Array
    lengths: Array
    finish_reason: Array

    @property
    def sequence_lengths(self) -> Array:
        """int32 [B]: p_b + n_b, the real (prompt and completion) tokens of each row."""
        return self.prompt_lengths + self.lengths

    @property
    def sequence_mask(self) -> Array:
        """bool [B, T]: True at prompt and completion tokens, False at padding."""
        positions = jnp.arange(self.tokens.shape[1])
        return positions[None, :] < self.sequence_lengths[:, None]

    @property
    def prompt_mask(self) -> Array:
        """bool [B, T]: True at prompt tokens."""
        positions = jnp.arange(self.tokens.shape[1])
        return positions[None, :] < self.prompt_lengths[:, None]

    def completions(self) -> list[list[int]]:
        """The completion token ids of each row, as Python lists (copies to host)."""
        tokens = np.asarray(self.tokens)
        starts = np.asarray(self.prompt_lengths)
        ends = np.asarray(self.sequence_lengths)
        return [tokens[b, starts[b] : ends[b]].tolist() for b in range(tokens.shape[0])]

    def finish_reason_names(self) -> list[str]:
        """`finish_reason` as names: "length", "eos" or "stop"."""
        return [FINISH_REASON_NAMES[int(r)] for r in np.asarray(self.finish_reason)]


def concat_rollouts(rollouts: list[Rollout], *, pad_id: int = 0) -> Rollout:
    """Rollouts of consecutive chunks of one batch as one `Rollout` (rows in order).

    Chunks whose prompt bucket differs have different widths; the narrower are right-padded
    (tokens with `pad_id`, masks False, log-probs 0), which keeps the layout: the prompt
    left-aligned, the completion after it.
    """
    width = max(r.tokens.shape[1] for r in rollouts)

    def pad(x, value):
        x = jnp.asarray(x)
        extra = width - x.shape[1]
        return x if extra == 0 else jnp.pad(x, ((0, 0), (0, extra)), constant_values=value)

    return Rollout(
        tokens=jnp.concatenate([pad(r.tokens, pad_id) for r in rollouts]),
        completion_mask=jnp.concatenate([pad(r.completion_mask, False) for r in rollouts]),
        logprobs=jnp.concatenate([pad(r.logprobs, 0.0) for r in rollouts]),
        raw_logprobs=jnp.concatenate([pad(r.raw_logprobs, 0.0) for r in rollouts]),
        prompt_lengths=jnp.concatenate([jnp.asarray(r.prompt_lengths) for r in rollouts]),
        lengths=jnp.concatenate([jnp.asarray(r.lengths) for r in rollouts]),
        finish_reason=jnp.concatenate([jnp.asarray(r.finish_reason) for r in rollouts]),
    )
