"""The fused token log-prob kernel compiled on a GPU (not interpreted), against the reference.

    python experiments/benchmarks/logprobs_gpu.py            # on a machine with a CUDA GPU

For N = 8192 tokens, D = 576, V = 49152 (SmolLM2's unembedding) in float32 and bfloat16:
`token_logprobs` with implementation "naive" (the [N, V] logits materialised, the reference),
"xla" (blocked over the vocabulary) and "pallas_gpu" (the Pallas/Triton kernel), forward and
forward + backward. Each is checked against "naive" (max absolute log-prob difference) and
timed (best of 10 after a compile call); the table gives the ratio to "naive" and the matmul
rate reached (2 N D V FLOPs forward, 3x that with the backward), beside the device's name.
"""

from __future__ import annotations

import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from kernels.logprobs import token_logprobs  # noqa: E402

N, D, V = 8192, 576, 49152
IMPLEMENTATIONS = ("naive", "xla", "pallas_gpu")


def timed(fn, *args, reps=10):
    jax.block_until_ready(fn(*args))  # compile
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        best = min(best, time.perf_counter() - start)
    return best


def main():
    rng = np.random.default_rng(0)
    device = jax.devices()[0]
    print(f"device: {device.device_kind} ({device.platform}), jax {jax.__version__}")
    print("| dtype | mode | implementation | ms | vs naive | TFLOP/s | max |logp - naive| |")
    print("|---|---|---|---|---|---|---|")
    for dtype in (jnp.float32, jnp.bfloat16):
        h = jnp.asarray(rng.standard_normal((8, N // 8, D), dtype=np.float32), dtype)
        w = jnp.asarray(0.05 * rng.standard_normal((D, V), dtype=np.float32), dtype)
        t = jnp.asarray(rng.integers(0, V, (8, N // 8), dtype=np.int32))
        reference = None
        for mode in ("fwd", "fwd+bwd"):
            base = None
            for impl in IMPLEMENTATIONS:

                def forward(h, w, impl=impl, t=t):
                    return token_logprobs(h, w, t, implementation=impl)

                def loss(h, w, forward=forward):
                    logp, entropy = forward(h, w)
                    return logp.sum() + 0.01 * entropy.sum()

                fn = jax.jit(forward if mode == "fwd" else jax.grad(loss, argnums=(0, 1)))
                try:
                    seconds = timed(fn, h, w)
                except Exception as e:  # report, keep going
                    print(
                        f"| {dtype.__name__} | {mode} | {impl} | failed: {type(e).__name__}: "
                        f"{str(e)[:120]} | | | |"
                    )
                    continue
                error = ""
                if mode == "fwd":
                    logp = np.asarray(fn(h, w)[0], np.float32)
                    if impl == "naive":
                        reference = logp
                    error = f"{np.max(np.abs(logp - reference)):.2e}"
                base = base or seconds
                flops = 2 * N * D * V * (1 if mode == "fwd" else 3)
                print(
                    f"| {dtype.__name__} | {mode} | {impl} | {1e3 * seconds:.2f} | "
                    f"{seconds / base:.2f}x | {flops / seconds / 1e12:.1f} | {error} |"
                )


if __name__ == "__main__":
    main()
