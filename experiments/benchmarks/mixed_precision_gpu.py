"""Mixed precision on one GPU: compiler memory figures and planner times against measurements.

    python experiments/benchmarks/mixed_precision_gpu.py --out mixed_precision.json   # on a GPU
    python experiments/benchmarks/mixed_precision_gpu.py --tiny --out /tmp/mp.json   # CPU check

A random-weight model of Llama-3.2-1B's shapes (`architecture("llama-3.2-1b")`: D 2048, MLP 8192,
16 layers, 32 heads / 8 KV heads, vocabulary 128256, tied embeddings) with bfloat16 compute and
float32 master weights (`ModelConfig.param_dtype`, `jaxrl_llm.models.precision`), on the default
JAX device, in two phases:

  train   the library's jitted, donated train step (`make_train_step`) with a GRPO loss: token
          log-probs (`sequence_logprobs`, full remat, the device's fused log-prob kernel), the
          PPO clip of DAPO's ranges over group-normalised advantages (`advantages.grpo`, groups
          of 4); AdamW at 1e-6 on float32 weights and moments; 8 rows x 1024 tokens.
  decode  the rollout's one-program decode (`Generator`) from the bfloat16 decode copy the
          rollout worker holds: 32 prompts of 128 tokens, exactly 128 new tokens each (EOS off,
          compaction off, so every row decodes every step), temperature 1.

For each: `compiled.memory_analysis()` (arguments + outputs - aliased + temporaries) against the
device's `peak_bytes_in_use`, and the median wall time of `--steps` calls (one warm-up call
excluded) against (a) the planner's roofline for this GPU (`jaxrl_llm.scale.costs` with the chip
table of `jaxrl_llm.scale.chips`: H100, H200), and (b) the plain ceilings: 6 N tokens FLOPs at the
chip's dense bf16 peak (989 TFLOP/s on both) for the train step, and for decode the HBM
roofline, every weight plus each row's filled KV cache read once per step at the HBM bandwidth
(H100 3.35 TB/s, H200 4.8 TB/s). Each phase runs in a process of its own: a device's peak-bytes
counter cannot be reset, so a phase measured after another would report the larger peak. The
figures are printed as one table and written as JSON to `--out`.

Imports: this checkout's models, training, losses, advantages and rollout modules and the
planner's cost model (loaded without `jaxrl_llm/scale/__init__.py`, which pulls in the
run-config machinery: ml_collections, reasoning-gym, ...). Measured (sys.modules after a run,
then each candidate blocked): beyond jax, flax, optax, chex, orbax-checkpoint, tokenizers, numpy
and their own dependencies, the import chain needs Jinja2 (with MarkupSafe; the chat templates
of `jaxrl_llm.models.tokenizer`) and safetensors (`jaxrl_llm.models.hf`), both pulled in by
`jaxrl_llm/models/__init__.py`; nothing else. `--tiny` runs tiny shapes on any device (this
2-core CPU in under a minute), with the H100's figures for the predictions.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import types

if "--phase" not in sys.argv:  # the parent only spawns the phases: it must not hold the GPU
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
# This checkout's library (jaxrl_llm, kernels), installed or not.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402

from jaxrl_llm import advantages, losses  # noqa: E402
from jaxrl_llm.models.architectures import architecture  # noqa: E402
from jaxrl_llm.models.config import tiny_config  # noqa: E402
from jaxrl_llm.models.precision import compute_params  # noqa: E402
from jaxrl_llm.models.transformer import init_model  # noqa: E402
from jaxrl_llm.rollout.engine import Generator  # noqa: E402
from jaxrl_llm.rollout.generation_config import GenerationConfig  # noqa: E402
from jaxrl_llm.training.logprobs import sequence_logprobs  # noqa: E402
from jaxrl_llm.training.optimizer import make_optimizer  # noqa: E402
from jaxrl_llm.training.train_step import TrainState, make_train_step  # noqa: E402

GIB = 2**30
GROUP = 4  # completions per prompt in the GRPO batch
FULL = dict(rows=8, length=1024, decode_batch=32, prompt=128, new_tokens=128)
TINY = dict(rows=4, length=64, decode_batch=4, prompt=16, new_tokens=8)


def model_config(tiny: bool):
    """Llama-3.2-1B's shapes (or a tiny model), bfloat16 compute, float32 master weights."""
    if tiny:
        return tiny_config(vocab_size=512, dtype="bfloat16", param_dtype="float32")
    return architecture("llama-3.2-1b", dtype="bfloat16", param_dtype="float32")


def planner_cost_model():
    """(jaxrl_llm.scale.costs, jaxrl_llm.scale.chips), imported without the package's
    `__init__.py` (its planner and programs import the run config and its dependencies)."""
    if "jaxrl_llm.scale" not in sys.modules:
        import jaxrl_llm

        package = types.ModuleType("jaxrl_llm.scale")
        package.__path__ = [os.path.join(os.path.dirname(jaxrl_llm.__file__), "scale")]
        sys.modules["jaxrl_llm.scale"] = package
    costs = importlib.import_module("jaxrl_llm.scale.costs")
    chips = importlib.import_module("jaxrl_llm.scale.chips")
    return costs, chips


def chip_of(device, name: str | None):
    """(the planner's `Chip` for `device` or for `name`, whether it is this device's)."""
    _, chips = planner_cost_model()
    if name:
        chip = chips.chip(name)
        return chip, chip.device_kind.lower() in device.device_kind.lower()
    for chip in chips.CHIPS.values():
        if chip.device_kind.lower() in device.device_kind.lower():
            return chip, True
    return chips.chip("h100"), False


def memory_figures(compiled) -> dict[str, float]:
    """The compiler's memory figures of a compiled program, and its footprint
    (arguments + outputs - aliased outputs + temporaries)."""
    m = compiled.memory_analysis()
    out = {
        "argument_bytes": m.argument_size_in_bytes,
        "output_bytes": m.output_size_in_bytes,
        "alias_bytes": m.alias_size_in_bytes,
        "temp_bytes": m.temp_size_in_bytes,
        "generated_code_bytes": m.generated_code_size_in_bytes,
        "compiler_peak_bytes": getattr(m, "peak_memory_in_bytes", 0),
    }
    out["footprint_bytes"] = (
        out["argument_bytes"] + out["output_bytes"] - out["alias_bytes"] + out["temp_bytes"]
    )
    return out


def device_memory(device) -> dict[str, float | None]:
    """bytes_in_use and peak_bytes_in_use of `device` (None where the backend has none: CPU)."""
    stats = device.memory_stats() or {}
    return {
        "in_use_bytes": stats.get("bytes_in_use"),
        "peak_bytes": stats.get("peak_bytes_in_use"),
        "limit_bytes": stats.get("bytes_limit"),
    }


def timed(call, steps: int) -> list[float]:
    """Wall seconds of `steps` calls of `call()` (which blocks), after one warm-up call."""
    call()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return times


def grpo_loss(model, batch):
    """GRPO's clipped policy loss (DAPO's clip-higher range) of one minibatch."""
    logp_bt, _ = sequence_logprobs(model, batch["tokens"], remat="full")
    return losses.ppo_clip(
        logp_bt, batch["old_logp"], batch["adv"], batch["mask"], clip_low=0.2, clip_high=0.28
    )


def train_phase(args) -> dict:
    """Compile, measure and predict one train step (see the module docstring)."""
    config = model_config(args.tiny)
    shapes = TINY if args.tiny else FULL
    rows, length = shapes["rows"], shapes["length"]
    device = jax.devices()[0]
    optimizer = make_optimizer(learning_rate=1e-6, max_grad_norm=1.0)
    graphdef = nnx.split(nnx.eval_shape(lambda: init_model(config)), nnx.Param)[0]

    @jax.jit
    def init_state():
        params = nnx.state(init_model(config, seed=0), nnx.Param)  # float32 master
        return TrainState(jnp.zeros((), jnp.int32), params, optimizer.init(params))

    state = init_state()
    rng = np.random.default_rng(0)
    mask = np.zeros((rows, length), np.float32)
    mask[:, length // 4 :] = 1.0  # a quarter prompt, the rest completion
    rewards = jnp.asarray(rng.random((rows // GROUP, GROUP)), jnp.float32)
    batch = {
        "tokens": jnp.asarray(rng.integers(1, config.vocab_size, (rows, length)), jnp.int32),
        "mask": jnp.asarray(mask),
        "adv": advantages.grpo(rewards).reshape(rows),
        "old_logp": jnp.asarray(-2.0 * mask),
    }
    step = make_train_step(graphdef, optimizer, grpo_loss)
    start = time.perf_counter()
    compiled = step.lower(state, batch).compile()
    compile_s = time.perf_counter() - start
    before = device_memory(device)
    holder = {"state": state}
    del state

    def call():
        holder["state"], metrics = compiled(holder["state"], batch)
        jax.block_until_ready(metrics["loss"])

    times = timed(call, args.steps)
    after = device_memory(device)
    master = holder["state"].params
    dtypes = sorted({str(x.dtype) for x in jax.tree.leaves(holder["state"])})
    seconds = statistics.median(times)
    tokens = rows * length
    n = config.num_params()
    chip, matches = chip_of(device, args.chip)
    costs, _ = planner_cost_model()
    from kernels.logprobs import default_implementation

    implementation = default_implementation()
    cost = costs.train_step_cost(
        config, rows, length, costs.split_of(config, rows, 1, 1, fsdp=True), remat="full",
        logprob_implementation=implementation,
    )  # fmt: skip
    planned = costs.roofline(cost, chip)
    six_n = 6 * n * tokens
    return {
        "phase": "train",
        "device": describe(device),
        "shape": f"{rows} x {length} tokens",
        "params": n,
        "master_dtype": str(jax.tree.leaves(master)[0].dtype),
        "state_dtypes": dtypes,
        "logprob_implementation": implementation,
        "compile_s": compile_s,
        "memory_analysis": memory_figures(compiled),
        "device_before": before,
        "device_after": after,
        "seconds": times,
        "median_s": seconds,
        "planner": {
            "chip": chip.name,
            "chip_is_this_device": matches,
            "seconds": planned.seconds,
            "bound": planned.bound,
            "flops": cost.flops,
            "hbm_bytes": cost.hbm_bytes,
        },
        "ceiling": {
            "what": "6 N tokens FLOPs at the chip's dense bf16 peak",
            "flops": six_n,
            "seconds": six_n / chip.peak_flops,
        },
        "mfu": six_n / seconds / chip.peak_flops,
    }


def decode_phase(args) -> dict:
    """Compile, measure and predict one rollout call (see the module docstring)."""
    config = model_config(args.tiny)
    shapes = TINY if args.tiny else FULL
    batch, prompt, new = shapes["decode_batch"], shapes["prompt"], shapes["new_tokens"]
    device = jax.devices()[0]
    model = nnx.eval_shape(lambda: init_model(config))

    @jax.jit
    def init_decode_copy():  # what `RolloutWorker.sync` holds: the master cast to bfloat16
        policy = init_model(config, seed=0)
        return compute_params(policy, nnx.state(policy, nnx.Param))

    params = init_decode_copy()
    weight_bytes = sum(x.nbytes for x in jax.tree.leaves(params))
    generation = GenerationConfig(
        max_new_tokens=new, temperature=1.0, eos_ids=(), min_prompt_bucket=prompt,
        compaction=False, prefix_sharing="none",
    )  # fmt: skip
    generator = Generator(model, generation)
    rng = np.random.default_rng(0)
    prompts = [rng.integers(1, config.vocab_size, prompt).tolist() for _ in range(batch)]
    start = time.perf_counter()
    compiled = generator.lower(prompts, params=params).compile()
    compile_s = time.perf_counter() - start
    before = device_memory(device)
    seeds = iter(range(1_000_000))

    def call():
        inputs, _, _ = generator.padded_inputs(prompts, next(seeds), None)
        rollout, _ = compiled(params, inputs)
        jax.block_until_ready(rollout.tokens)

    times = timed(call, args.steps)
    after = device_memory(device)
    seconds = statistics.median(times)
    tokens_per_s = batch * new / seconds
    chip, matches = chip_of(device, args.chip)
    costs, _ = planner_cost_model()
    split = costs.split_of(config, batch, 1, 1, fsdp=False)
    cost = costs.decode_cost(config, batch, batch, prompt, new, split)
    planned = costs.roofline(cost.prefill, chip).seconds + costs.roofline(cost.decode, chip).seconds
    kv_per_token = 2 * config.num_layers * config.num_kv_heads * config.head_dim * 2  # bf16
    bytes_per_step = weight_bytes + batch * (prompt + new / 2) * kv_per_token
    roofline_step_s = bytes_per_step / chip.hbm_bandwidth
    return {
        "phase": "decode",
        "device": describe(device),
        "shape": f"{batch} rows, {prompt} prompt + {new} new tokens",
        "weights_dtype": str(jax.tree.leaves(params)[0].dtype),
        "weight_bytes": weight_bytes,
        "compile_s": compile_s,
        "memory_analysis": memory_figures(compiled),
        "device_before": before,
        "device_after": after,
        "seconds": times,
        "median_s": seconds,
        "tokens_per_s": tokens_per_s,
        "planner": {
            "chip": chip.name,
            "chip_is_this_device": matches,
            "seconds": planned,
            "tokens_per_s": batch * new / planned,
        },
        "ceiling": {
            "what": "HBM roofline: weights + each row's filled KV cache read once per step",
            "bytes_per_step": bytes_per_step,
            "step_s": roofline_step_s,
            "seconds": new * roofline_step_s,  # the decode steps alone: no prefill
            "tokens_per_s": batch / roofline_step_s,
        },
    }


def describe(device) -> str:
    """The device and jax version, one line."""
    return f"{device.device_kind} ({device.platform}), jax {jax.__version__}"


def _bytes(x) -> str:
    if x is None:
        return "-"
    return f"{x / GIB:.2f} GiB" if x >= GIB / 4 else f"{x / 2**20:.2f} MiB"


def _seconds(x: float) -> str:
    return f"{x:.3f} s" if x >= 0.1 else f"{1e3 * x:.3f} ms"


def table(device: str, results: list[dict]) -> str:
    """One Markdown table of both phases."""
    head = (
        "| phase | shape | memory_analysis (args + out - alias + temp = total) | "
        "measured (in use before, peak after) | median time | planner (chip) | "
        "ceiling | measured vs planner, vs ceiling |\n|---|---|---|---|---|---|---|---|"
    )
    lines = [f"device: {device}", head]
    for r in results:
        if "error" in r:
            lines.append(f"| {r['phase']} | failed: {r['error']} | | | | | | |")
            continue
        m, b, a = r["memory_analysis"], r["device_before"], r["device_after"]
        memory = (
            f"{_bytes(m['argument_bytes'])} + {_bytes(m['output_bytes'])} - "
            f"{_bytes(m['alias_bytes'])} + {_bytes(m['temp_bytes'])} = "
            f"{_bytes(m['footprint_bytes'])}"
        )
        measured = f"{_bytes(b['in_use_bytes'])}, {_bytes(a['peak_bytes'])}"
        p, c, t = r["planner"], r["ceiling"], r["median_s"]
        chip = p["chip"] + ("" if p["chip_is_this_device"] else ", not this device")
        if r["phase"] == "train":
            ceiling = f"6N FLOPs: {_seconds(c['seconds'])} (MFU {100 * r['mfu']:.1f}%)"
            median = _seconds(t)
            planner = f"{_seconds(p['seconds'])}, {p['bound']}-bound ({chip})"
        else:
            ceiling = f"HBM: {c['tokens_per_s']:,.0f} tok/s"
            median = f"{_seconds(t)} ({r['tokens_per_s']:,.0f} tok/s)"
            planner = f"{_seconds(p['seconds'])} ({p['tokens_per_s']:,.0f} tok/s; {chip})"
        ratios = f"{t / p['seconds']:.2f}x, {t / c['seconds']:.2f}x"
        lines.append(
            f"| {r['phase']} | {r['shape']} | {memory} | {measured} | {median} | "
            f"{planner} | {ceiling} | {ratios} |"
        )
    return "\n".join(lines)


def run_phases(phases: tuple[str, ...], args) -> list[dict]:
    """Runs each phase in a fresh process (its own peak-bytes counter) and returns their
    results: one after another on an accelerator, side by side for `--tiny` (a CPU check)."""
    with tempfile.TemporaryDirectory() as tmp:
        running = []
        for phase in phases:
            path = os.path.join(tmp, f"{phase}.json")
            command = [sys.executable, os.path.abspath(__file__), "--phase", phase,
                       "--json", path, "--steps", str(args.steps)]  # fmt: skip
            command += ["--tiny"] if args.tiny else []
            command += ["--chip", args.chip] if args.chip else []
            process = subprocess.Popen(
                command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
            if not args.tiny:
                process.wait()
            running.append((phase, path, process))
        results = []
        for phase, path, process in running:
            _, stderr = process.communicate()
            if process.returncode != 0:
                tail = stderr.strip().splitlines()[-1:] or ["no output"]
                results.append({"phase": phase, "error": tail[0][:200], "stderr": stderr[-4000:]})
                continue
            with open(path) as f:
                results.append(json.load(f))
        return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", help="Write the results as JSON here.")
    parser.add_argument("--tiny", action="store_true", help="Tiny shapes (a CPU check).")
    parser.add_argument("--steps", type=int, default=5, help="Timed calls per phase.")
    parser.add_argument("--chip", default=None, help="Planner chip (h100, h200); default: match.")
    parser.add_argument("--phase", choices=("train", "decode"), help=argparse.SUPPRESS)
    parser.add_argument("--json", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.phase:  # a worker: one phase, results to --json
        result = (train_phase if args.phase == "train" else decode_phase)(args)
        with open(args.json, "w") as f:
            json.dump(result, f)
        return
    results = run_phases(("train", "decode"), args)
    description = next((r["device"] for r in results if "device" in r), "unknown device")
    print(table(description, results))
    if args.out:
        summary = {"device": description, "tiny": args.tiny, "phases": results}
        with open(args.out, "w") as f:
            json.dump(summary, f, indent=2)
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
