"""Row chunks of the frozen forwards: reference log-probs, critic values, reward-model scores.

A step's B = num_prompts * group_size rows go through these forwards `forward_batch` rows at a
time (`config.rollout.forward_batch`; 0: all B at once), as `rollout.decode_batch` chunks the
decode: one program of `forward_batch` rows runs B / forward_batch times, so its activations
(the [rows, T, D] hidden states, the attention's and the log-prob kernel's blocks) take a chunk's
memory, not a step's. Rows are independent in these forwards, so the chunked outputs equal the
whole batch's (up to the rounding of a different matmul batch). `python -m jaxrl_llm.plan`
picks the chunk (docs/scale.md).

    chunk = forward_batch_of(config)                    # validated against the step's rows
    values_bt = in_row_chunks(critic_forward, tokens_bt, chunk)
"""

from __future__ import annotations

from collections.abc import Callable

import ml_collections
import numpy as np

FIELD = "config.rollout.forward_batch"


def forward_batch_of(config: ml_collections.ConfigDict) -> int:
    """`config.rollout.forward_batch` (0 when the config has no such field), checked against
    the step's rows.

    Raises:
      ValueError: a value that is not an int >= 0 or does not divide num_prompts * group_size,
        in one line naming the field and the chunks that would.
    """
    rows = config.rollout.num_prompts * config.rollout.group_size
    chunk = config.rollout.get("forward_batch", 0)
    if isinstance(chunk, int) and not isinstance(chunk, bool) and chunk >= 0:
        if chunk == 0 or rows % chunk == 0:
            return chunk
    fits = [d for d in range(1, rows + 1) if rows % d == 0]
    raise ValueError(
        f"{FIELD}={chunk!r} must divide the {rows} rows of a step (rollout.num_prompts * "
        f"rollout.group_size): one of {fits}, or 0 for all rows at once."
    )


def in_row_chunks(
    forward: Callable[[np.ndarray], np.ndarray], tokens_bt: np.ndarray, chunk: int
) -> np.ndarray:
    """`forward` over `chunk` rows of `tokens_bt` at a time, its outputs joined along rows.

    Args:
      forward: host int32 [rows, T] -> host [rows, ...] (a role's placed, jitted forward).
      tokens_bt: int32 [B, T].
      chunk: rows per call; 0 (or B or more) calls `forward` once on all B rows.

    Returns:
      [B, ...]: `forward(tokens_bt)` computed chunk by chunk.

    Example:
      >>> in_row_chunks(lambda t: t.sum(1), np.ones((4, 3), np.int32), 2)
      array([3, 3, 3, 3])
    """
    tokens_bt = np.asarray(tokens_bt)
    rows = tokens_bt.shape[0]
    if not chunk or chunk >= rows:
        return np.asarray(forward(tokens_bt))
    return np.concatenate(
        [np.asarray(forward(tokens_bt[start : start + chunk])) for start in range(0, rows, chunk)]
    )
