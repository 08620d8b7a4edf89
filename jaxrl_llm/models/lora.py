"""LoRA adapters on the Transformer's projections, for RL with a frozen base (PERL).

LoRA (Hu et al. 2021, "LoRA: Low-Rank Adaptation of Large Language Models", arXiv:2106.09685)
adds to a frozen weight W [D_in, D_out] a trainable update scale * A B, A [D_in, r] and
B [r, D_out] (B starts at zero, so an adapted model starts as its base), scale = alpha / r.
PERL (Sidahmed et al. 2024, "PERL: Parameter Efficient Reinforcement Learning from Human
Feedback", arXiv:2403.10704) trains RL policies, reward models and value models this way.

An adapter is an `nnx.Module` attached to the module that owns the weight, under
`<weight name>_lora` (e.g. `layers[i].attention.q_proj_lora`); `layers.project` adds its
output to the frozen projection, x W + scale * dropout(x) A B, without forming the merged weight.
Its parameters are `nnx.LoRAParam` (a subclass of `nnx.Param`), so
`nnx.split(model, nnx.LoRAParam, nnx.Param)` separates what trains from what stays frozen.

Why not qwix (`qwix.apply_lora_to_model`, which Tunix uses): it creates adapters by
intercepting `dot_general` on a module's own parameter during a first eager call. Our
projections flatten 3-D weights ([D, N, H], [N, H, D]) before the GEMM, so eagerly it found only
the 2-D MLP weights; under `jit` it tried to create the attention adapters inside the trace and
failed, and the layer `lax.scan` (`transformer._scan_layers`) rebuilds layers with `nnx.merge`,
which drops the per-module state qwix keeps (measured with qwix 0.1.8: "Cannot find rngs in the
current module"). The adapters here are explicit parameters, so the scan, the decode engine,
the sharding rules and Orbax see them like any other.

Functions on parameter states (no model needed): `merged_params` folds adapters into the base
weights (for decoding or export), `unmerged_params` takes them back out, `split_adapters`
separates adapter and base leaves of a full state.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import math
from collections.abc import Iterator

import jax
import jax.numpy as jnp
from flax import nnx

from jaxrl_llm.models.layers import dense

Array = jax.Array

# Weight name -> how many of its leading dimensions are the input (flattened to D_in).
TARGET_INPUT_DIMS = {
    "q_proj": 1,  # [D, N, H]
    "k_proj": 1,  # [D, K, H]
    "v_proj": 1,  # [D, K, H]
    "o_proj": 2,  # [N, H, D]
    "gate_proj": 1,  # [D, F]
    "up_proj": 1,  # [D, F]
    "down_proj": 1,  # [F, D]
}
ALL_TARGETS = tuple(TARGET_INPUT_DIMS)
ADAPTER_SUFFIX = "_lora"
ROLLOUT_MODES = ("merge", "apply")

_DROPOUT_KEY: contextvars.ContextVar[Array | None] = contextvars.ContextVar(
    "lora_dropout_key", default=None
)


@dataclasses.dataclass(frozen=True)
class LoraConfig:
    """What to adapt and how.

    Attributes:
      rank: r, the adapters' inner width (> 0).
      alpha: the update is scaled by alpha / rank.
      dropout: dropout rate on an adapter's input while training (0 disables); active only
        inside `dropout_key(...)`, which the train step opens with a key per update.
      targets: weight names to adapt, a subset of `ALL_TARGETS`.
    """

    rank: int = 8
    alpha: float = 16.0
    dropout: float = 0.0
    targets: tuple[str, ...] = ALL_TARGETS

    def __post_init__(self):
        object.__setattr__(self, "targets", tuple(self.targets))
        if not isinstance(self.rank, int) or self.rank <= 0:
            raise ValueError(f"LoraConfig: rank={self.rank!r} must be a positive integer.")
        if not self.alpha > 0:
            raise ValueError(f"LoraConfig: alpha={self.alpha!r} must be > 0.")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"LoraConfig: dropout={self.dropout!r} must be in [0, 1).")
        unknown = [t for t in self.targets if t not in TARGET_INPUT_DIMS]
        if unknown or not self.targets:
            raise ValueError(
                f"LoraConfig: targets={self.targets!r}: each must be one of {ALL_TARGETS}, "
                "and at least one is needed."
            )

    @property
    def scale(self) -> float:
        """alpha / rank, the factor on A B."""
        return self.alpha / self.rank


@contextlib.contextmanager
def dropout_key(key: Array | None) -> Iterator[None]:
    """Adapters traced inside this block apply their dropout with `key` (None: no dropout)."""
    token = _DROPOUT_KEY.set(key)
    try:
        yield
    finally:
        _DROPOUT_KEY.reset(token)


class LoraAdapter(nnx.Module):
    """The low-rank update of one weight: x [B, T, D_in] -> scale * dropout(x) A B [B, T, D_out].

    Args:
      a: initial A [D_in, r]; b: initial B [r, D_out] (zeros: the adapted model starts as its base).
      scale: alpha / r.
      dropout: the rate applied under `dropout_key`.
      logical_axes_in, logical_axes_out: the sharding names of D_in and D_out (those of the
        weight's first input and first output dimension), so adapters shard like their weight.
    """

    def __init__(
        self,
        a: Array,
        b: Array,
        *,
        scale: float,
        dropout: float,
        logical_axes_in: str | None,
        logical_axes_out: str | None,
    ):
        self.lora_a = nnx.LoRAParam(a, logical_axes=(logical_axes_in, None))
        self.lora_b = nnx.LoRAParam(b, logical_axes=(None, logical_axes_out))
        self.scale = float(scale)
        self.dropout = float(dropout)

    def __call__(self, x_btd: Array) -> Array:
        key = _DROPOUT_KEY.get()
        if self.dropout > 0.0 and key is not None:
            keep = jax.random.bernoulli(
                jax.random.fold_in(key, x_btd.shape[-1]), 1.0 - self.dropout, x_btd.shape
            )
            x_btd = jnp.where(keep, x_btd / (1.0 - self.dropout), 0.0).astype(x_btd.dtype)
        low_btr = dense(x_btd, self.lora_a[...])
        return dense(low_btr, self.lora_b[...]) * jnp.asarray(self.scale, low_btr.dtype)


def _targets_of(model: nnx.Module, targets) -> list[tuple[nnx.Module, str]]:
    """(owning module, weight name) of every targeted weight in `model`."""
    found = []
    for _, module in nnx.iter_modules(model):
        for name in targets:
            weight = getattr(module, name, None)
            if isinstance(weight, nnx.Param) and not isinstance(weight, nnx.LoRAParam):
                found.append((module, name))
    return found


def add_adapters(model: nnx.Module, config: LoraConfig, *, seed: int = 0) -> nnx.Module:
    """Attaches a fresh adapter to every targeted weight of `model` (in place; returns it).

    A is He-uniform (fan-in D_in) as in Hu et al.'s reference code, B is zero, in the weight's
    dtype. Raises ValueError if `model` already has adapters or has none of the targets.
    """
    if has_adapters(model):
        raise ValueError("add_adapters: the model already has LoRA adapters.")
    targets = _targets_of(model, config.targets)
    if not targets:
        raise ValueError(
            f"add_adapters: the model has none of the target weights {config.targets}."
        )
    key = jax.random.key(seed)
    for index, (module, name) in enumerate(targets):
        weight = getattr(module, name)
        n_in = TARGET_INPUT_DIMS[name]
        d_in = math.prod(weight.shape[:n_in])
        d_out = math.prod(weight.shape[n_in:])
        axes = weight.get_metadata().get("logical_axes") or (None,) * weight.ndim
        bound = math.sqrt(6.0 / d_in)  # He uniform
        a = jax.random.uniform(
            jax.random.fold_in(key, index), (d_in, config.rank), jnp.float32, -bound, bound
        ).astype(weight.dtype)
        b = jnp.zeros((config.rank, d_out), weight.dtype)
        adapter = LoraAdapter(
            a,
            b,
            scale=config.scale,
            dropout=config.dropout,
            logical_axes_in=axes[0],
            logical_axes_out=axes[n_in],
        )
        setattr(module, name + ADAPTER_SUFFIX, adapter)
    return model


def has_adapters(model_or_state) -> bool:
    """Whether a model (or a parameter state) carries LoRA adapters."""
    if isinstance(model_or_state, nnx.Module):
        return any(isinstance(m, LoraAdapter) for _, m in nnx.iter_modules(model_or_state))
    return any(_is_adapter_path(path) for path, _ in _flat(model_or_state))


def strip_adapters(model: nnx.Module) -> nnx.Module:
    """A copy of `model`'s structure without adapters (the base model; arrays are shared, not
    copied: jax arrays are immutable)."""
    base = nnx.clone(model)
    for _, module in list(nnx.iter_modules(base)):
        for name in list(vars(module)):
            if name.endswith(ADAPTER_SUFFIX) and isinstance(getattr(module, name), LoraAdapter):
                delattr(module, name)
    return base


def _flat(state) -> list[tuple[tuple, object]]:
    return list(nnx.to_flat_state(state))


def _is_adapter_path(path: tuple) -> bool:
    return any(isinstance(p, str) and p.endswith(ADAPTER_SUFFIX) for p in path)


def split_adapters(params: nnx.State) -> tuple[nnx.State, nnx.State]:
    """(adapter leaves, base leaves) of a full parameter state, each an `nnx.State` with the
    original paths; `nnx.merge_state(base, adapters)` joins them again."""
    adapters, base = [], []
    for path, leaf in _flat(params):
        (adapters if _is_adapter_path(path) else base).append((path, leaf))
    return nnx.from_flat_state(adapters), nnx.from_flat_state(base)


def _value(leaf):
    return leaf.get_value() if isinstance(leaf, nnx.Variable) else leaf


def _with_value(leaf, value):
    return leaf.replace(value) if isinstance(leaf, nnx.Variable) else value


def _fold(params: nnx.State, scale: float, sign: float) -> nnx.State:
    """Base leaves of `params` with sign * scale * A B added to each adapted weight."""
    adapters, base = split_adapters(params)
    updates: dict[tuple, dict[str, Array]] = {}  # weight path -> {"lora_a": A, "lora_b": B}
    for path, leaf in _flat(adapters):
        weight_path = path[:-2] + (path[-2][: -len(ADAPTER_SUFFIX)],)
        updates.setdefault(weight_path, {})[path[-1]] = _value(leaf)
    flat = []
    for path, leaf in _flat(base):
        if path in updates:
            factors = updates.pop(path)
            a, b, w = factors["lora_a"], factors["lora_b"], _value(leaf)
            delta = (a.astype(jnp.float32) @ b.astype(jnp.float32)).reshape(w.shape)
            leaf = _with_value(leaf, (w.astype(jnp.float32) + sign * scale * delta).astype(w.dtype))
        flat.append((path, leaf))
    if updates:
        raise ValueError(f"merged_params: adapters without a base weight: {sorted(updates)}")
    return nnx.from_flat_state(flat)


def merged_params(params: nnx.State, scale: float) -> nnx.State:
    """The base-model parameter state with every adapter folded in: W + scale * A B.

    Args:
      params: a full state (base weights and adapters) of an adapted model.
      scale: the adapters' alpha / rank (`LoraConfig.scale`).

    Returns:
      A state of the base model's structure (`strip_adapters(model)`), e.g. for decoding with
      no adapter matmuls or for export. Computed in float32, cast back to each weight's dtype.
    """
    return _fold(params, scale, 1.0)


def unmerged_params(merged: nnx.State, adapters: nnx.State, scale: float) -> nnx.State:
    """The inverse of `merged_params`: (W + scale A B) - scale A B, joined with `adapters` into
    a full state again (exact up to float32 rounding)."""
    base = _fold(nnx.merge_state(merged, adapters), scale, -1.0)
    return nnx.merge_state(base, adapters)


def adapter_scale(model: nnx.Module) -> float:
    """The alpha / rank shared by `model`'s adapters (ValueError if none or if they differ)."""
    scales = {m.scale for _, m in nnx.iter_modules(model) if isinstance(m, LoraAdapter)}
    if len(scales) != 1:
        raise ValueError(f"adapter_scale: expected one adapter scale, found {sorted(scales)}.")
    return scales.pop()


def adapter_bytes(params: nnx.State) -> int:
    """Bytes of the adapter leaves of a state (what an adapter-only weight sync moves)."""
    adapters, _ = split_adapters(params)
    return sum(_value(x).nbytes for x in jax.tree.leaves(adapters))


def merged_model(model: nnx.Module) -> nnx.Module:
    """A base-model copy of an adapted `model` whose weights are W + scale * A B (for export
    or plain decoding); `model` itself is left as it is."""
    base = strip_adapters(model)
    nnx.update(base, merged_params(nnx.state(model, nnx.Param), adapter_scale(model)))
    return base
