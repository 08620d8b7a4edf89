"""Trace-time argument checks shared by the losses and the advantage estimators.

Every check runs on shapes and Python values only, so it fires while a function is traced
(under `jax.jit` too) and never costs device time. Messages name the function and the argument.
"""

from collections.abc import Sequence

import chex
import jax
import jax.numpy as jnp


def same_shape(fn: str, axes: str | None = None, **arrays: jax.Array) -> None:
    """Asserts that every named array has the rank of `axes` (if given) and the first one's shape.

    Args:
      fn: name of the calling function, for the message.
      axes: the expected axes, e.g. "[B, T]"; its rank is checked. None accepts any rank.
      **arrays: the arrays to check, keyed by their argument names; order matters, the first
        array sets the expected shape.

    Raises:
      AssertionError: naming the function and the offending argument.
    """
    names = list(arrays)
    first = arrays[names[0]]
    for name in names:
        x = arrays[name]
        if axes is not None:
            rank = axes.count(",") + 1
            chex.assert_rank(x, rank, custom_message=f"{fn}: {name} must be {axes}")
        chex.assert_equal_shape(
            [first, x],
            custom_message=(
                f"{fn}: {name} has shape {tuple(jnp.shape(x))} but {names[0]} has shape "
                f"{tuple(jnp.shape(first))}"
            ),
        )


def per_token(fn: str, name: str, x: jax.Array, like_bt: jax.Array, like_name: str) -> jax.Array:
    """Returns `x` as a [B, T] array: [B, T] passes through, [B] is broadcast over T.

    Args:
      fn: name of the calling function, for the message.
      name: the argument name of `x`, for the message.
      x: [B, T] per-token values or [B] per-sequence values.
      like_bt: a [B, T] array whose shape `x` must match.
      like_name: the argument name of `like_bt`, for the message.

    Returns:
      [B, T] array.

    Raises:
      AssertionError: if `x` is neither [B] nor [B, T] for the B and T of `like_bt`.
    """
    chex.assert_rank(x, {1, 2}, custom_message=f"{fn}: {name} must be [B, T] or [B]")
    if x.ndim == 1:
        chex.assert_axis_dimension(
            x,
            0,
            like_bt.shape[0],
            custom_message=f"{fn}: {name} has shape {x.shape}, expected [B]=({like_bt.shape[0]},)",
        )
        return jnp.broadcast_to(x[:, None], like_bt.shape)
    same_shape(fn, **{like_name: like_bt, name: x})
    return x


def choice(fn: str, name: str, value: str, options: Sequence[str]) -> None:
    """Raises ValueError if `value` is not one of `options`."""
    if value not in options:
        raise ValueError(f"{fn}: unknown {name}={value!r}; expected one of {tuple(options)}")


def floating(*arrays: jax.Array) -> tuple[jax.Array, ...]:
    """Upcasts each array to at least float32 (bf16/fp16 log-probs are summed in float32)."""
    return tuple(
        jnp.asarray(x).astype(jnp.promote_types(jnp.asarray(x).dtype, jnp.float32)) for x in arrays
    )
