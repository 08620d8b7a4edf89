"""The default model's decode step and train step taken apart, against their matmuls alone.

    .venv/bin/python experiments/benchmarks/forward.py                  # decode + train
    .venv/bin/python experiments/benchmarks/forward.py --quick          # batch 1 and 8, S = 174
    .venv/bin/python experiments/benchmarks/forward.py --skip-train --batches 32

Decode, for every batch B and cache length S (SmolLM2-135M-Instruct, float32, real weights; a
cache of S slots, every query at position S - 1 so attention reads every slot):

  step          one decode step as the engine runs it: `decode_step` (embed, 30 layers with
                the cache write, final norm, unembedding) + `sample_tokens` (temperature 1),
                16 steps in a `fori_loop` over a donated cache, per step.
  matmuls       the floor: the same step's matmuls alone, each as a plain 2-D matmul of the
                same shapes (q, k, v, o, gate, up, down per layer and the 576 x 49152
                unembedding), plus attention's two batched dots over the cache (scores and
                weighted values, [B*K] batches of [G, H] x [H, S] and [G, S] x [S, H]).
  proj. matmuls the 2-D matmuls without attention's dots (the floor of FACTS.md).
  parts         projections (q, k, v, o), attention (scores, mask, softmax, values), MLP,
                norms + RoPE, unembedding, sampling, cache write: each jitted alone over
                every layer with the model's own code, so their sum shows what the step adds.

Train (one subprocess per remat policy, so each peak RSS is its own): the GRPO train step of the
main job (`policy_loss` through the fused log-prob kernel, AdamW, the non-finite guard) on a
[rows, width] batch, against the matmuls alone of its forward and backward (every 2-D matmul of
the forward, with the two of its backward; attention's batched dots likewise). Reported: step
time, compile time, XLA's temporary bytes (`memory_analysis()` of the compiled step) and the
process's peak RSS.

Machine ceilings in the same run: read bandwidth (a reduction over 1 GiB on every core) and the
numpy matmul rate. All times are the best of `--repeats`.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxrl_llm.models import from_pretrained, resolve_model_path
from jaxrl_llm.models.layers import apply_rope, dense, write_cache
from jaxrl_llm.rollout.decode_state import decode_step, next_token_logits
from jaxrl_llm.rollout.sampling import sample_tokens, sequence_keys, step_keys
from kernels.decode_attention import masked_decode_attention

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from machine import (  # noqa: E402
    best_seconds,
    cpu_description,
    matmul_rate,
    peak_rss_bytes,
    read_bandwidth,
    run_for_result,
)

LOOP_STEPS = 16


def filled_cache(model, batch: int, slots: int):
    """A KV cache of `slots` slots holding random keys and values (so no slot is special)."""
    cache = model.init_cache(batch, slots)
    key = jax.random.key(1)
    return jax.tree.map(
        lambda x: 0.5 * jax.random.normal(jax.random.fold_in(key, x.size), x.shape, x.dtype), cache
    )


# --- decode ------------------------------------------------------------------------------------
def decode_step_seconds(model, batch: int, slots: int, repeats: int) -> float:
    """Seconds per engine decode step (model + sampling), 16 steps in a donated fori_loop."""
    graphdef, state = nnx.split(model)
    keys = sequence_keys(0, batch)
    temperature = jnp.ones((batch,), jnp.float32)

    @functools.partial(jax.jit, donate_argnums=(2,))
    def loop(state, tokens_b, cache):
        m = nnx.merge(graphdef, state)

        def body(j, carry):
            tokens_b, cache = carry
            positions = jnp.full((batch,), slots - LOOP_STEPS + j, jnp.int32)
            logits, cache = decode_step(m, tokens_b, positions, cache)
            out = sample_tokens(step_keys(keys, j), logits, temperature_b=temperature)
            return out.tokens, cache

        return jax.lax.fori_loop(0, LOOP_STEPS, body, (tokens_b, cache))

    carry = [jnp.zeros((batch,), jnp.int32), filled_cache(model, batch, slots)]

    def run():
        carry[:] = loop(state, *carry)
        return carry[1]

    return best_seconds(run, repeats=repeats) / LOOP_STEPS


def matmul_floor_seconds(model, batch: int, slots: int, repeats: int, attention: bool) -> float:
    """The decode step's matmuls alone as plain 2-D matmuls (+ attention's batched dots)."""
    c = model.config
    d, n, k, h = c.hidden_size, c.num_heads, c.num_kv_heads, c.head_dim
    g = n // k
    rng = np.random.default_rng(0)
    w = lambda *s: jnp.asarray(0.02 * rng.standard_normal(s, np.float32))
    layers = [
        (w(d, n * h), w(d, k * h), w(d, k * h), w(n * h, d), w(d, c.intermediate_size),
         w(d, c.intermediate_size), w(c.intermediate_size, d))
        for _ in range(c.num_layers)
    ]  # fmt: skip
    head = model.unembed_matrix()
    cache = filled_cache(model, batch, slots) if attention else None

    @jax.jit
    def chain(layers, head, cache, x):
        acc = jnp.zeros((batch,), jnp.float32)
        for i, (wq, wk, wv, wo, wg, wu, wd) in enumerate(layers):
            q, kk, v = x @ wq, x @ wk, x @ wv
            acc = acc + kk[:, 0] + v[:, 0]  # keep k and v alive (their values are not used)
            if attention:
                keys, values = cache.layers[i]
                q_bkgh = q.reshape(batch, k, g, h)
                s = jnp.einsum("bkgh,bksh->bkgs", q_bkgh, keys)
                q = jnp.einsum("bkgs,bksh->bkgh", s, values).reshape(batch, n * h)
            x = x + q @ wo
            x = x + ((x @ wg) * (x @ wu)) @ wd
        return x @ head, acc

    x = jnp.full((batch, d), 0.01, jnp.float32)
    return best_seconds(chain, layers, head, cache, x, repeats=repeats)


def decode_part_seconds(model, batch: int, slots: int, repeats: int) -> dict[str, float]:
    """Seconds of each part of a decode step, every layer, each part jitted alone."""
    graphdef, state = nnx.split(model)
    c = model.config
    x_b1d = jnp.full((batch, 1, c.hidden_size), 0.01, jnp.float32)
    pos_b = jnp.full((batch,), slots - 1, jnp.int32)
    q_b1nh = jnp.full((batch, 1, c.num_heads, c.head_dim), 0.01, jnp.float32)
    kv_b1kh = jnp.full((batch, 1, c.num_kv_heads, c.head_dim), 0.01, jnp.float32)
    cache = filled_cache(model, batch, slots)
    inv_freq = jnp.ones((c.head_dim // 2,), jnp.float32) * 1e-3

    def over_layers(fn):
        @jax.jit
        def run(state, *args):
            m = nnx.merge(graphdef, state)
            return [fn(m, i, layer, *args) for i, layer in enumerate(m.layers)]

        return lambda *args: run(state, *args)

    def projections(m, i, layer, x):
        a = layer.attention
        q = dense(x, a.q_proj[...])
        return dense(q, a.o_proj[...]), dense(x, a.k_proj[...]), dense(x, a.v_proj[...])

    def attention(m, i, layer, q, cache):
        keys, values = cache.layers[i]
        return masked_decode_attention(q[:, 0], keys, values, pos_b + 1)

    def norms_rope(m, i, layer, x, q, kv):
        pos = pos_b[:, None]
        return (layer.input_norm(x), layer.post_attention_norm(x),
                apply_rope(q, pos, inv_freq), apply_rope(kv, pos, inv_freq))  # fmt: skip

    @functools.partial(jax.jit, donate_argnums=(0,))
    def cache_write(cache, kv):
        return type(cache)(tuple(write_cache(lkv, kv, kv, pos_b[:, None]) for lkv in cache.layers))

    cache_box = [filled_cache(model, batch, slots)]

    def run_cache_write():
        cache_box[0] = cache_write(cache_box[0], kv_b1kh)
        return cache_box[0]

    @jax.jit
    def unembed(state, x):
        return next_token_logits(nnx.merge(graphdef, state), x[:, 0])

    logits = unembed(state, x_b1d)
    keys = sequence_keys(0, batch)
    sample = jax.jit(lambda k, x: sample_tokens(k, x, temperature_b=jnp.ones((batch,))))
    parts = {
        "projections": (over_layers(projections), (x_b1d,)),
        "attention": (over_layers(attention), (q_b1nh, cache)),
        "mlp": (over_layers(lambda m, i, layer, x: layer.mlp(x)), (x_b1d,)),
        "norms+rope": (over_layers(norms_rope), (x_b1d, q_b1nh, kv_b1kh)),
        "unembedding": (lambda x: unembed(state, x), (x_b1d,)),
        "sampling": (sample, (keys, logits)),
        "cache write": (run_cache_write, ()),
    }
    return {name: best_seconds(fn, *args, repeats=repeats) for name, (fn, args) in parts.items()}


def run_decode(model, batches, cache_lengths, repeats: int) -> list[dict]:
    """Prints the decode table; returns its rows."""
    part_names = ["projections", "attention", "mlp", "norms+rope", "unembedding", "sampling",
                  "cache write"]  # fmt: skip
    header = (
        "| B | S | step ms | matmuls ms | step / matmuls | proj. matmuls ms | step / proj. | "
        + " | ".join(f"{p} ms" for p in part_names)
        + " | sum of parts / step | compile s |"
    )
    print(header)
    print("|" + "---|" * (header.count("|") - 1), flush=True)
    rows = []
    for batch in batches:
        for slots in cache_lengths:
            t = time.perf_counter()
            step = decode_step_seconds(model, batch, slots, repeats)
            compile_s = time.perf_counter() - t - (repeats + 1) * step * LOOP_STEPS
            floor = matmul_floor_seconds(model, batch, slots, repeats, attention=True)
            proj = matmul_floor_seconds(model, batch, slots, repeats, attention=False)
            parts = decode_part_seconds(model, batch, slots, repeats)
            row = dict(batch=batch, slots=slots, step=step, matmuls=floor, proj_matmuls=proj,
                       compile_s=compile_s, **parts)  # fmt: skip
            rows.append(row)
            print(
                f"| {batch} | {slots} | {1e3 * step:.1f} | {1e3 * floor:.1f} | {step / floor:.2f} "
                f"| {1e3 * proj:.1f} | {step / proj:.2f} | "
                + " | ".join(f"{1e3 * parts[p]:.2f}" for p in part_names)
                + f" | {sum(parts.values()) / step:.2f} | {compile_s:.1f} |",
                flush=True,
            )
    return rows


# --- train -------------------------------------------------------------------------------------
def train_matmul_floor_seconds(config, rows: int, width: int, repeats: int) -> float:
    """Forward + backward of the train step's matmuls alone (2-D, plus attention's batched dots)."""
    c = config
    d, n, k, h, f = c.hidden_size, c.num_heads, c.num_kv_heads, c.head_dim, c.intermediate_size
    m, g = rows * width, n // k
    rng = np.random.default_rng(0)
    w = lambda *s: jnp.asarray(0.02 * rng.standard_normal(s, np.float32))
    params = dict(
        layers=[(w(d, n * h), w(d, k * h), w(d, k * h), w(n * h, d), w(d, f), w(d, f), w(f, d))
                for _ in range(c.num_layers)],
        head=w(d, c.vocab_size),
    )  # fmt: skip

    def loss(params, x):
        for wq, wk, wv, wo, wg, wu, wd in params["layers"]:
            q = (x @ wq).reshape(rows * k, g * width, h)
            kk = (x @ wk).reshape(rows * k, width, h)
            v = (x @ wv).reshape(rows * k, width, h)
            s = jnp.einsum("bqh,bsh->bqs", q, kk)
            a = jnp.einsum("bqs,bsh->bqh", s, v).reshape(m, n * h)
            x = x + a @ wo
            x = x + ((x @ wg) * (x @ wu)) @ wd
        return jnp.sum(x @ params["head"]) * 1e-6

    grad = jax.jit(jax.grad(loss))
    x = jnp.full((m, d), 0.01, jnp.float32)
    return best_seconds(grad, params, x, repeats=repeats)


def train_child(args) -> dict:
    """One train-step measurement in this (fresh) process; the parent reads its JSON line."""
    import optax

    from jaxrl_llm.algorithms.batch import PolicyBatch
    from jaxrl_llm.algorithms.policy_loss import PolicyLossConfig, policy_loss
    from jaxrl_llm.models.config import ModelConfig, RopeScaling
    from jaxrl_llm.models.transformer import init_model
    from jaxrl_llm.training.train_step import create_train_state, make_train_step

    fields = json.loads(args.model_config)
    if fields.get("rope_scaling"):
        fields["rope_scaling"] = RopeScaling(**fields["rope_scaling"])
    config = ModelConfig(**fields)
    rows, width = args.rows, args.width
    model = init_model(config)
    optimizer = optax.adamw(1e-6)
    graphdef, state = create_train_state(model, optimizer)
    del model
    loss_config = PolicyLossConfig(remat=args.remat, temperature=0.7)
    loss_fn = lambda m, b: policy_loss(m, b, config=loss_config)
    step = make_train_step(graphdef, optimizer, loss_fn)
    rng = np.random.default_rng(0)
    prompt = width // 3
    batch = PolicyBatch(
        tokens=jnp.asarray(rng.integers(0, config.vocab_size, (rows, width)), jnp.int32),
        loss_mask=jnp.asarray(np.arange(width)[None] >= prompt, jnp.float32).repeat(rows, 0),
        old_logp=jnp.full((rows, width), -2.0, jnp.float32),
        ref_logp=jnp.zeros((rows, width), jnp.float32),
        advantages=jnp.asarray(rng.standard_normal(rows), jnp.float32),
    )
    t = time.perf_counter()
    compiled = step.lower(state, batch).compile()
    compile_s = time.perf_counter() - t
    temp_bytes = compiled.memory_analysis().temp_size_in_bytes
    box = [state]

    def run():
        box[0], metrics = compiled(box[0], batch)
        return metrics

    seconds = best_seconds(run, repeats=args.train_repeats)
    return dict(remat=args.remat, step=seconds, compile_s=compile_s, temp_bytes=temp_bytes,
                peak_rss=peak_rss_bytes())  # fmt: skip


def run_train(model_config, rows, width, policies, repeats: int) -> list[dict]:
    """Prints the train table (one subprocess per policy); returns its rows."""
    import dataclasses

    floor = train_matmul_floor_seconds(model_config, rows, width, repeats)
    header = (
        "| rows x width | remat | step s | matmuls s | step / matmuls | compile s "
        "| XLA temp GB | peak RSS GB |"
    )
    print(header)
    print("|" + "---|" * (header.count("|") - 1), flush=True)
    results = []
    for policy in policies:
        cmd = [sys.executable, os.path.abspath(__file__), "--train-child", "--remat", policy]
        cmd += ["--rows", str(rows), "--width", str(width), "--train-repeats", str(repeats)]
        cmd += ["--model-config", json.dumps(dataclasses.asdict(model_config))]
        r = run_for_result(cmd, "TRAIN_RESULT", f"remat={policy}")
        if r is None:
            continue
        r["matmuls"] = floor
        results.append(r)
        print(
            f"| {rows} x {width} | {policy} | {r['step']:.2f} | {floor:.2f} "
            f"| {r['step'] / floor:.2f} | {r['compile_s']:.1f} | {r['temp_bytes'] / 1e9:.2f} "
            f"| {r['peak_rss'] / 1e9:.2f} |",
            flush=True,
        )
    return results


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--batches", default="1,8,32")
    parser.add_argument("--cache-lengths", default="64,174,512")
    parser.add_argument("--rows", type=int, default=32, help="train batch rows")
    parser.add_argument("--width", type=int, default=96, help="train batch width (tokens)")
    parser.add_argument("--remat", default="none,full,dots", help="train remat policies")
    parser.add_argument("--repeats", type=int, default=5, help="timed decode runs (best kept)")
    parser.add_argument("--train-repeats", type=int, default=2, help="timed train steps")
    parser.add_argument("--quick", action="store_true", help="batches 1, 8; S = 174; full only")
    parser.add_argument("--skip-train", action="store_true")
    parser.add_argument("--skip-decode", action="store_true")
    parser.add_argument("--json", help="also write every row to this file")
    parser.add_argument("--train-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--model-config", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.train_child:
        print("TRAIN_RESULT " + json.dumps(train_child(args)), flush=True)
        return
    if args.quick:
        args.batches, args.cache_lengths, args.remat, args.repeats = "1,8", "174", "full", 3

    bandwidth, flops = read_bandwidth(), matmul_rate()
    model, _ = from_pretrained(args.model)
    config = model.config
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    weight_bytes = 4 * config.num_params()
    print(
        f"# forward benchmark {datetime.date.today()} | {cpu_description()}, load average "
        f"{load:.1f} | jax {jax.__version__} | "
        f"{os.path.basename(resolve_model_path(args.model))} float32, "
        f"{config.num_params() / 1e6:.1f}M params\n# read bandwidth {bandwidth / 1e9:.1f} GB/s "
        f"(weights alone: {1e3 * weight_bytes / bandwidth:.1f} ms per step), numpy matmul "
        f"{flops / 1e9:.0f} GFLOP/s",
        flush=True,
    )
    out = {"date": str(datetime.date.today()), "load": load, "read_bandwidth": bandwidth,
           "matmul_rate": flops}  # fmt: skip
    if not args.skip_decode:
        batches = [int(b) for b in args.batches.split(",")]
        lengths = [int(s) for s in args.cache_lengths.split(",")]
        out["decode"] = run_decode(model, batches, lengths, args.repeats)
    del model
    if not args.skip_train:
        out["train"] = run_train(
            config, args.rows, args.width, args.remat.split(","), args.train_repeats
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
