"""The optimizer factory: AdamW with linear warmup, optional cosine decay and gradient clipping."""

from __future__ import annotations

import math

import jax.numpy as jnp
import optax

SCHEDULES = ("constant", "cosine", "linear")

# The weight magnitude `check_update_precision` judges a learning rate against: the standard
# deviation Llama / GPT-2 initialise projections with (`initializer_range`), about the size of
# a trained model's typical projection weight.
TYPICAL_WEIGHT = 0.02


def smallest_kept_update(dtype, weight: float = TYPICAL_WEIGHT) -> float:
    """The smallest update a weight of magnitude `weight` stored in `dtype` keeps.

    A float with m explicit mantissa bits (bfloat16: 7, float32: 23) holds |w| in
    [2^e, 2^(e+1)) on a grid of step 2^(e - m); adding u rounds to the nearest grid point, so an
    update with |u| < 2^(e - m) / 2 is lost.

    Example:
      >>> smallest_kept_update("bfloat16", 0.02)  # step 2^-13 = 1.2e-4 at 0.02
      6.103515625e-05
    """
    step = 2.0 ** (math.floor(math.log2(abs(weight))) - jnp.finfo(dtype).nmant)
    return step / 2


def check_update_precision(
    learning_rate: float, param_dtype: str, *, lr_field: str, dtype_field: str
) -> None:
    """Raises ValueError when AdamW updates would round away on weights stored in `param_dtype`.

    Adam's update is about the learning rate per step (exactly it on the first, bias-corrected
    step), so a rate below `smallest_kept_update(param_dtype)` leaves typical weights unchanged:
    measured with optax 0.2.8, 20 AdamW steps at 1e-6 (random gradients) on 1,000 bfloat16
    weights drawn around 0.02 (std 0.005) changed 0.1% of them; in float32, all of them. Refused rather than warned: such a run trains nothing, and the
    fix is one field. The message names both fields and both fixes.
    """
    kept = smallest_kept_update(param_dtype)
    if learning_rate >= kept:
        return
    step = 2 * kept
    raise ValueError(
        f"{dtype_field}={param_dtype!r} cannot train at {lr_field}={learning_rate:g}: a "
        f"{param_dtype} weight of {TYPICAL_WEIGHT} moves in steps of {step:.1e}, so AdamW "
        f"updates of about the learning rate (below half a step, {kept:.1e}) round away; set "
        f"{dtype_field}='float32' (float32 master weights and optimizer state, computing in "
        f"the model dtype) or a learning rate of at least {kept:.1e}."
    )


def learning_rate_schedule(
    *,
    learning_rate: float,
    warmup_steps: int = 0,
    total_steps: int | None = None,
    schedule: str = "constant",
    field: str = "optimizer",
) -> optax.Schedule:
    """Linear warmup from 0 to `learning_rate` over `warmup_steps`, then constant/cosine/linear decay.

    Decay schedules reach 0 at `total_steps` (required for them). `field` is the config section
    an error names (`config.optimizer`, `config.critic`), so it names the flag to change.
    """
    if schedule not in SCHEDULES:
        raise ValueError(f"{field}.schedule={schedule!r} must be one of {SCHEDULES}.")
    if learning_rate <= 0:
        raise ValueError(f"{field}.learning_rate={learning_rate} must be > 0.")
    warmup = optax.linear_schedule(0.0, learning_rate, max(warmup_steps, 1))
    if schedule == "constant":
        after = optax.constant_schedule(learning_rate)
    else:
        if total_steps is None:
            raise ValueError(f"{field}.schedule={schedule!r} needs total_steps to decay over.")
        if total_steps <= warmup_steps:
            raise ValueError(
                f"{field}.schedule={schedule!r} decays over the run's {total_steps} optimizer "
                f"updates, which must outnumber {field}.warmup_steps={warmup_steps}: set "
                f"--{field}.warmup_steps below {total_steps}, raise --config.train.num_steps, "
                f"or set --{field}.schedule=constant."
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
    field: str = "optimizer",
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
      field: the config section errors name, e.g. "config.critic".

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
        field=field,
    )
    adamw = optax.adamw(lr, b1=b1, b2=b2, eps=eps, weight_decay=weight_decay)
    if max_grad_norm is None:
        return adamw
    if max_grad_norm <= 0:
        raise ValueError(f"{field}.max_grad_norm={max_grad_norm} must be > 0 (or None).")
    return optax.chain(optax.clip_by_global_norm(max_grad_norm), adamw)
