"""The optimizer factory: AdamW with linear warmup, optional cosine decay and gradient clipping."""

from __future__ import annotations

import optax

SCHEDULES = ("constant", "cosine", "linear")


def learning_rate_schedule(
    *,
    learning_rate: float,
    warmup_steps: int = 0,
    total_steps: int | None = None,
    schedule: str = "constant",
) -> optax.Schedule:
    """Linear warmup from 0 to `learning_rate` over `warmup_steps`, then constant/cosine/linear decay.

    Decay schedules reach 0 at `total_steps` (required for them).
    """
    if schedule not in SCHEDULES:
        raise ValueError(f"optimizer: schedule={schedule!r} must be one of {SCHEDULES}.")
    if learning_rate <= 0:
        raise ValueError(f"optimizer: learning_rate={learning_rate} must be > 0.")
    warmup = optax.linear_schedule(0.0, learning_rate, max(warmup_steps, 1))
    if schedule == "constant":
        after = optax.constant_schedule(learning_rate)
    else:
        if total_steps is None or total_steps <= warmup_steps:
            raise ValueError(
                f"optimizer: schedule={schedule!r} needs total_steps > warmup_steps "
                f"(got total_steps={total_steps}, warmup_steps={warmup_steps})."
            )
        decay_steps = total_steps - warmup_steps
        if schedule == "cosine":
            after = optax.cosine_decay_schedule(learning_rate, decay_steps)
        else:
            after = optax.linear_schedule(learning_rate, 0.0, decay_steps)
    if warmup_steps <= 0:
        return after
    return optax.join_schedules([warmup, after], [warmup_steps])


def make_optimizer(
    *,
    learning_rate: float,
    warmup_steps: int = 0,
    total_steps: int | None = None,
    schedule: str = "constant",
    weight_decay: float = 0.0,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    max_grad_norm: float | None = 1.0,
) -> optax.GradientTransformation:
    """AdamW (Loshchilov & Hutter, arXiv:1711.05101) behind global-norm gradient clipping.

    Args:
      learning_rate: peak learning rate.
      warmup_steps: linear warmup steps (optimizer updates, not RL steps).
      total_steps: updates until a decaying schedule reaches 0.
      schedule: "constant", "cosine" or "linear" after warmup.
      weight_decay: decoupled weight decay (applied to every parameter).
      b1, b2, eps: Adam moments' decay rates and epsilon.
      max_grad_norm: clip the global gradient norm to this; None disables clipping.

    Returns:
      An optax GradientTransformation.

    Example:
      >>> tx = make_optimizer(learning_rate=1e-5, warmup_steps=10, max_grad_norm=1.0)
    """
    lr = learning_rate_schedule(
        learning_rate=learning_rate,
        warmup_steps=warmup_steps,
        total_steps=total_steps,
        schedule=schedule,
    )
    adamw = optax.adamw(lr, b1=b1, b2=b2, eps=eps, weight_decay=weight_decay)
    if max_grad_norm is None:
        return adamw
    if max_grad_norm <= 0:
        raise ValueError(f"optimizer: max_grad_norm={max_grad_norm} must be > 0 (or None).")
    return optax.chain(optax.clip_by_global_norm(max_grad_norm), adamw)
