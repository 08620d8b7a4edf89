"""Tunables of the fused token log-prob kernels: one frozen dataclass, validated per backend.

Neither ``T`` nor ``V`` has to be a multiple of its block: every backend runs ``ceil(N / block_t)``
row blocks and ``ceil(V / block_v)`` vocabulary blocks and masks the ragged last block itself, so
validation never asks for divisibility of the token or vocabulary axes. What it checks are the
hardware rules of each backend:

- ``pallas_tpu`` (Mosaic): a block's last two dimensions must be multiples of (8, 128) unless they
  span the whole array, so ``block_t % 8 == 0`` and ``block_v % 128 == 0``.
- ``pallas_gpu`` (Triton lowering): every in-kernel array must have a power-of-2 size and every
  ``dot`` operand dimension must be at least 16, so ``block_t``, ``block_v`` and ``block_d`` are
  powers of 2 >= 16; the model width ``D`` is walked in ``block_d`` chunks, so ``block_d`` must
  divide ``D``.
- ``xla`` (the plain-jnp chunked path): any positive sizes.

Blocks larger than the problem are clamped (to the next legal size) by :meth:`BlockConfig.fit`, so
one default works for a 3-token unit test and an 8192-token train step.
"""

from __future__ import annotations

import dataclasses

__all__ = ["BlockConfig", "default_config", "IMPLEMENTATIONS"]

# Every name `token_logprobs(implementation=...)` accepts.
IMPLEMENTATIONS = ("naive", "xla", "pallas_tpu", "pallas_gpu")


def _round_up(x: int, m: int) -> int:
    return -(-x // m) * m


def _next_pow2(x: int) -> int:
    return 1 << max(0, (x - 1).bit_length())


def _is_pow2(x: int) -> bool:
    return x > 0 and x & (x - 1) == 0


@dataclasses.dataclass(frozen=True)
class BlockConfig:
    """Block sizes of one backend.

    Attributes:
      block_t: rows (flattened ``B * T`` tokens) per block.
      block_v: vocabulary columns per block; the ``[block_t, block_v]`` float32 logit tile is
        the largest temporary of the forward pass.
      block_d: model-width chunk of the GPU kernel's matmul loop (``pallas_gpu`` only; must
        divide ``D``). ``None`` elsewhere.
      num_v_splits: the GPU forward splits the vocabulary into this many independent programs
        per row block and merges their partial log-sum-exps afterwards (flash-decoding style),
        for occupancy when ``B * T`` is small (``pallas_gpu`` only).
    """

    block_t: int
    block_v: int
    block_d: int | None = None
    num_v_splits: int = 1

    def __post_init__(self):
        for name in ("block_t", "block_v", "num_v_splits"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}={value!r} must be a positive int")
        if self.block_d is not None and (not isinstance(self.block_d, int) or self.block_d < 1):
            raise ValueError(f"block_d={self.block_d!r} must be a positive int or None")

    def fit(self, implementation: str, *, tokens: int, vocab: int, model_dim: int) -> BlockConfig:
        """Clamps blocks larger than the problem, then validates for ``implementation``.

        Args:
          implementation: one of ``IMPLEMENTATIONS`` other than ``"naive"``.
          tokens: ``N = B * T``, the number of rows.
          vocab: ``V``.
          model_dim: ``D``.

        Returns:
          A config whose blocks are legal for that backend and no larger than needed.

        Raises:
          ValueError: with the offending field and the rule it breaks.
        """
        block_t, block_v, block_d = self.block_t, self.block_v, self.block_d
        if implementation == "xla":
            block_t, block_v = min(block_t, tokens), min(block_v, vocab)
        elif implementation == "pallas_tpu":
            # A block may overhang the array (Pallas masks the copy); keep the (8, 128) tiling.
            block_t = min(block_t, _round_up(tokens, 8))
            block_v = min(block_v, _round_up(vocab, 128))
        elif implementation == "pallas_gpu":
            block_t = min(block_t, max(16, _next_pow2(tokens)))
            block_v = min(block_v, max(16, _next_pow2(vocab)))
        else:
            raise ValueError(
                f"{implementation=} has no block config; pick one of {IMPLEMENTATIONS}"
            )
        fitted = dataclasses.replace(self, block_t=block_t, block_v=block_v, block_d=block_d)
        fitted.validate(implementation, model_dim=model_dim, vocab=vocab)
        return fitted

    def validate(self, implementation: str, *, model_dim: int, vocab: int) -> None:
        """Raises ``ValueError`` if these blocks break ``implementation``'s hardware rules."""
        block_t, block_v, block_d = self.block_t, self.block_v, self.block_d
        if implementation == "pallas_tpu":
            if block_t % 8:
                raise ValueError(f"{block_t=} must be a multiple of 8 (TPU sublanes)")
            if block_v % 128:
                raise ValueError(f"{block_v=} must be a multiple of 128 (TPU lanes)")
        elif implementation == "pallas_gpu":
            for name, value in (("block_t", block_t), ("block_v", block_v), ("block_d", block_d)):
                if value is None or not _is_pow2(value) or value < 16:
                    raise ValueError(
                        f"{name}={value} must be a power of 2 >= 16 (Triton tensor sizes and "
                        "dot operands)"
                    )
            if model_dim % block_d:
                raise ValueError(f"{block_d=} must divide {model_dim=}")
            n_vblocks = -(-vocab // block_v)
            if self.num_v_splits > n_vblocks:
                raise ValueError(
                    f"num_v_splits={self.num_v_splits} must be at most the {n_vblocks} vocabulary "
                    f"blocks of {vocab=} with {block_v=}"
                )
        elif implementation != "xla":
            raise ValueError(
                f"{implementation=} has no block config; pick one of {IMPLEMENTATIONS}"
            )


def default_config(implementation: str, *, model_dim: int | None = None) -> BlockConfig:
    """The unfitted default blocks of each backend (call :meth:`BlockConfig.fit` next).

    - ``xla``: 1024 x 2048 float32 logit tiles (8 MiB, inside the dev CPU's 32 MiB L3); among the
      fastest of a short sweep at B*T = 2048, D = 576, V = 49152 (2048 x 2048 and 512 x 4096
      were within ~15% in CPU time); see experiments/benchmarks/RESULTS.md.
    - ``pallas_tpu``: 256 x 512 tiles up to D = 2048; with D = 2048 in bfloat16 the
      double-buffered inputs and the float32 accumulators stay near 12 MiB, inside the default
      scoped VMEM of v5e/v6e (16 MiB). Wider models halve the tiles with D (the backward's
      [D, block_v] float32 accumulator and double-buffered [block_t, D] and [D, block_v] blocks
      grow with it): 128 x 128 at D = 4096, 64 x 128 at D = 8192; the kernels also raise their
      scoped VMEM to ``pallas_tpu.VMEM_LIMIT_BYTES``. At 256 x 512 and at 128 x 256 an 8B model's
      (D = 4096) backward failed to compile for v5e (CompileTimeScopedVmemOom, 18 MiB needed).
    - ``pallas_gpu``: 64 x 128 logit tiles built from 64-wide chunks of ``D`` (4 warps).
    """
    if implementation == "xla":
        return BlockConfig(block_t=1024, block_v=2048)
    if implementation == "pallas_tpu":
        if model_dim is None or model_dim <= 2048:
            return BlockConfig(block_t=256, block_v=512)
        # float32 accumulators: [block_t, D] (dh) and [D, block_v] (dW) <= 2 MiB each.
        block_t = max(8, min(256, (2 << 20) // (4 * model_dim)) // 8 * 8)
        block_v = max(128, min(512, (2 << 20) // (4 * model_dim)) // 128 * 128)
        return BlockConfig(block_t=block_t, block_v=block_v)
    if implementation == "pallas_gpu":
        block_d = 64
        if model_dim is not None:
            # Largest power-of-2 chunk <= 64 that divides D (D % 16 == 0 for every model we load).
            while block_d > 16 and model_dim % block_d:
                block_d //= 2
        return BlockConfig(block_t=64, block_v=128, block_d=block_d)
    raise ValueError(f"{implementation=} has no block config; pick one of {IMPLEMENTATIONS}")
