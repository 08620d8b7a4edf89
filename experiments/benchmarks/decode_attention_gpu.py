"""Decode attention on a GPU: the masked full-cache XLA path against the Pallas kernel that
reads only each row's filled cache, at several filled lengths, against the HBM roofline.

    python experiments/benchmarks/decode_attention_gpu.py --out decode_attention.json  # GPU
    python experiments/benchmarks/decode_attention_gpu.py --smoke --out /tmp/da.json   # any CPU

A random-weight model of Llama-3.2-1B's shapes (16 layers, D 2048, 32 query / 8 KV heads of 64,
vocabulary 128256, tied embeddings) in bfloat16; batches 32 and 128. One program per (batch,
attention) runs the 127 decode steps of a 128-token rollout (token 0 comes from the prefill) in
a `lax.fori_loop`, each the library's own `decode_step` (every layer's attention over the KV
cache, the unembedding) feeding back its argmax, over the cache the engine allocates for a
1024-token prompt bucket: 1024 + 127 slots (the kernel pads them to whole blocks). Each row
has filled p prompt slots, p = 128, 512, 1024 or "ragged" (uniform in 64..1024): step j writes
slot p + j - 1 and attends to slots 0..p + j - 1. The filled lengths are runtime data, so every
fill reuses the program. "xla" (`decode_attention="xla"`) reads every slot of the cache at
every step; "kernel" (`"kernel"`: JAX's Pallas GPU split-K decode attention, Triton lowering,
`kernels.decode_attention`) reads the blocks holding the filled slots.

Time: the median of `--reps` calls after a warm-up call, divided by the steps. The floor: a
step reads every weight once plus each row's filled cache slots, at the HBM bandwidth
(`--hbm_tb_s`, default from the device: H100 3.35 TB/s, H200 4.8 TB/s); the "XLA reads" column
prices the whole cache instead. Agreement: the share of greedy tokens of the first fill's
warm-up call where the kernel matches XLA from identical zero caches (bfloat16 near-ties can
flip a token of a random model; the CPU tests check the values).

`--smoke`: a tiny model, batches 2 and 4, a 64-slot bucket, 7 steps, the kernel run in Pallas'
interpreter (`decode_attention="pallas_gpu"`): checks on a CPU that the script runs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402

from jaxrl_llm.models import decode_kernel  # noqa: E402
from jaxrl_llm.models.architectures import architecture  # noqa: E402
from jaxrl_llm.models.config import tiny_config  # noqa: E402
from jaxrl_llm.models.transformer import init_model  # noqa: E402
from jaxrl_llm.rollout import attention_choice, kv_cache  # noqa: E402
from jaxrl_llm.rollout.decode_state import decode_step  # noqa: E402
from kernels.decode_attention import decode_attention, padded_slots  # noqa: E402

FULL = dict(batches=(32, 128), bucket=1024, new=128, fills=("128", "512", "1024", "ragged"))
SMOKE = dict(batches=(2, 4), bucket=64, new=8, fills=("16", "64", "ragged"))
HBM_TB_S = {"H200": 4.8, "H100": 3.35}  # NVIDIA's datasheets (jaxrl_llm.scale.chips)


def model_config(smoke: bool):
    """Llama-3.2-1B's shapes in bfloat16 (or a tiny model: heads of 16, the kernel's least)."""
    if smoke:
        return tiny_config(dtype="bfloat16")
    return architecture("llama-3.2-1b", dtype="bfloat16")


def prompt_lengths(fill: str, batch: int, bucket: int) -> np.ndarray:
    """int32 [batch] filled prompt slots: all `fill`, or "ragged": uniform in bucket/16..bucket."""
    if fill == "ragged":
        rng = np.random.default_rng(0)
        return rng.integers(max(bucket // 16, 1), bucket + 1, size=batch).astype(np.int32)
    return np.full((batch,), int(fill), np.int32)


def decode_program(graphdef, implementation: str, interpret: bool, steps: int):
    """A jitted `steps`-step greedy decode over a donated cache: (state, tokens [B], prompt
    lengths [B], cache) -> (cache, tokens [steps, B])."""

    def run(state, tokens_b, prompt_b, cache):
        model = nnx.merge(graphdef, state)

        def step(j, carry):
            cache, tokens_b, out_nb = carry
            logits_bv, cache = decode_step(model, tokens_b, prompt_b + j, cache)
            tokens_b = jnp.argmax(logits_bv, axis=-1).astype(jnp.int32)
            return cache, tokens_b, out_nb.at[j].set(tokens_b)

        out_nb = jnp.zeros((steps, tokens_b.shape[0]), jnp.int32)
        with decode_kernel.use(attention_choice.scope(implementation, interpret, None)):
            cache, _, out_nb = jax.lax.fori_loop(0, steps, step, (cache, tokens_b, out_nb))
        return cache, out_nb

    return jax.jit(run, donate_argnums=(3,))


def attention_error(
    config, batch: int, slots: int, prompt_b, implementation: str, interpret: bool
) -> float:
    """Max |out - reference| of one decode attention (`implementation`: the kernel, or XLA's
    masked attention for a baseline) on random bfloat16 inputs at these filled lengths, the
    reference being XLA's in float32 over the whole (masked) cache.

    The greedy-token agreement of a random model diverges after the first bfloat16 near-tie
    (every later token feeds on it); this checks the kernel's values on the device itself."""
    keys = jax.random.split(jax.random.key(1), 3)
    n, kv, h = config.num_heads, config.num_kv_heads, config.head_dim
    q_bnh = jax.random.normal(keys[0], (batch, n, h), jnp.bfloat16)
    k_bksh = jax.random.normal(keys[1], (batch, kv, slots, h), jnp.bfloat16)
    v_bksh = jax.random.normal(keys[2], (batch, kv, slots, h), jnp.bfloat16)
    lengths_b = jnp.asarray(prompt_b)
    got = decode_attention(q_bnh, k_bksh, v_bksh, lengths_b, implementation=implementation,
                           interpret=interpret)  # fmt: skip
    want = decode_attention(*(x.astype(jnp.float32) for x in (q_bnh, k_bksh, v_bksh)),
                            lengths_b, implementation="xla")  # fmt: skip
    return float(jnp.max(jnp.abs(got.astype(jnp.float32) - want)))


def hbm_bandwidth(device, given: float | None) -> float:
    """Bytes/s: `--hbm_tb_s`, else the datasheet figure of this GPU."""
    if given:
        return given * 1e12
    for name, tb_s in HBM_TB_S.items():
        if name in device.device_kind:
            return tb_s * 1e12
    return HBM_TB_S["H100"] * 1e12  # the smallest of the table: a floor, not a measurement


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="where the JSON goes")
    parser.add_argument("--smoke", action="store_true", help="tiny shapes, kernel interpreted")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--hbm_tb_s", type=float, default=None)
    args = parser.parse_args()
    shapes = SMOKE if args.smoke else FULL
    bucket, new = shapes["bucket"], shapes["new"]
    device = jax.devices()[0]
    bandwidth = hbm_bandwidth(device, args.hbm_tb_s)
    config = model_config(args.smoke)
    model = init_model(config, seed=0)
    graphdef, state = nnx.split(model)
    weight_bytes = sum(x.nbytes for x in jax.tree.leaves(state))
    kv_per_token = 2 * config.num_layers * config.num_kv_heads * config.head_dim * 2  # bf16
    # On a GPU the platform's kernel; on a CPU (the smoke check) the GPU kernel interpreted.
    kernel_choice = "pallas_gpu" if device.platform == "cpu" else "kernel"
    choices = {"xla": "xla", "kernel": kernel_choice}
    print(f"device: {device.device_kind} ({device.platform}), jax {jax.__version__}; "
          f"{config.num_params() / 1e9:.3f}B params, weights {weight_bytes / 2**30:.2f} GiB; "
          f"cache bucket {bucket} + {new} new; HBM {bandwidth / 1e12:.2f} TB/s",
          flush=True)  # fmt: skip
    cases, compile_s = [], {}
    for batch in shapes["batches"]:
        first_tokens = {}
        for name, choice in choices.items():
            implementation, interpret = attention_choice.resolve(
                choice, head_dim=config.head_dim, cache_dtype=jnp.bfloat16, cache_shardings=None
            )
            slots = padded_slots(bucket + new - 1, implementation)
            cache = kv_cache.allocate(model, batch, slots, dtype=jnp.bfloat16)
            program = decode_program(graphdef, implementation, interpret, new - 1)
            tokens = jnp.ones((batch,), jnp.int32)
            start = time.perf_counter()
            compiled = program.lower(state, tokens, jnp.zeros((batch,), jnp.int32), cache)
            compiled = compiled.compile()
            compile_s[f"{name} batch {batch}"] = time.perf_counter() - start
            for fill in shapes["fills"]:
                prompt_b = prompt_lengths(fill, batch, bucket)
                cache, out = compiled(state, tokens, jnp.asarray(prompt_b), cache)  # warm-up
                jax.block_until_ready(out)
                first_tokens.setdefault(name, np.asarray(out))
                seconds = []
                for _ in range(args.reps):
                    start = time.perf_counter()
                    cache, out = compiled(state, tokens, jnp.asarray(prompt_b), cache)
                    jax.block_until_ready(out)
                    seconds.append(time.perf_counter() - start)
                filled = float(np.sum(prompt_b + np.arange(1, new).mean()))  # mean over steps
                error = attention_error(config, batch, slots, prompt_b, implementation, interpret)
                cases.append(dict(
                    batch=batch, fill=fill, mean_prompt=float(prompt_b.mean()), attention=name,
                    implementation=implementation, interpret=interpret, cache_slots=slots,
                    max_abs_error=error,
                    seconds=seconds, step_ms=1e3 * statistics.median(seconds) / (new - 1),
                    floor_ms=1e3 * (weight_bytes + filled * kv_per_token) / bandwidth,
                    xla_reads_ms=1e3 * (weight_bytes + batch * slots * kv_per_token) / bandwidth,
                ))  # fmt: skip
            del cache
        agree = first_tokens["xla"] == first_tokens["kernel"]
        for case in cases[-2 * len(shapes["fills"]) :]:
            case.update(first_step_agreement=float(agree[0].mean()), agreement=float(agree.mean()))
    rows = {(c["batch"], c["fill"], c["attention"]): c for c in cases}
    print(
        "| batch | prompt filled (mean) | XLA ms / step | kernel ms / step | speedup | "
        "floor ms (filled reads) | XLA / floor | kernel / floor | XLA reads ms | tokens agree | "
        "max abs error XLA / kernel |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")  # fmt: skip
    for batch in shapes["batches"]:
        for fill in shapes["fills"]:
            x, k = rows[(batch, fill, "xla")], rows[(batch, fill, "kernel")]
            print(f"| {batch} | {fill} ({x['mean_prompt']:.0f}) | {x['step_ms']:.3f} | "
                  f"{k['step_ms']:.3f} | {x['step_ms'] / k['step_ms']:.2f}x | "
                  f"{k['floor_ms']:.3f} | {x['step_ms'] / x['floor_ms']:.2f}x | "
                  f"{k['step_ms'] / k['floor_ms']:.2f}x | {x['xla_reads_ms']:.3f} | "
                  f"{k['agreement']:.0%} | {x['max_abs_error']:.1e} / {k['max_abs_error']:.1e} |")  # fmt: skip
    print("compile s: " + ", ".join(f"{k} {v:.1f}" for k, v in compile_s.items()))
    result = dict(
        device=f"{device.device_kind} ({device.platform})", jax=jax.__version__,
        smoke=args.smoke, model=repr(config), weight_bytes=weight_bytes,
        kv_bytes_per_token=kv_per_token, hbm_bytes_per_s=bandwidth, shapes=shapes,
        compile_s=compile_s, cases=cases,
    )  # fmt: skip
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
