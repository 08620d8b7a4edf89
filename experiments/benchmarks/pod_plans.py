"""Pod-scale plans from this CPU: every phase of 1-70B models compiled for TPU slices, placement
searches, and the cost model checked against what can be measured.

    python experiments/benchmarks/pod_plans.py search v5e-64 [--model llama-3.1-70b]
    python experiments/benchmarks/pod_plans.py matrix          # every phase of every model
    python experiments/benchmarks/pod_plans.py anchors         # MaxText's published MFU
    python experiments/benchmarks/pod_plans.py cpu             # SmolLM2 measured vs predicted
    python experiments/benchmarks/pod_plans.py h200            # RESULTS.md's H200 decode
    python experiments/benchmarks/pod_plans.py kernels         # 8B phases with / without Pallas

search   `jaxrl_llm.scale.Searcher` over colocated and split placements for the GRPO workload
         of experiments/configs/grpo_llama8b_pod.py (64 prompts x 16, 1,024 + 4,096 tokens):
         the plans table, the best plan's phases, what was rejected and why. The same as
         `python -m jaxrl_llm.plan`, with the tensor-parallel sizes fixed below.
matrix   one natural slice per model, every phase the runners compile (actor train step, rollout
         at a decode chunk, reference, critic values and reward model at the same chunk of rows,
         critic train step, the weight sync's programs):
         the compiler's per-chip memory, collectives and the predicted seconds.
anchors  our compiled train step at MaxText's published shapes, its predicted MFU against the
         published one (cited in the table), both with MaxText's count of useful FLOPs
         (`costs.model_flops`: no recomputation, causal attention).
cpu      the cost model with this CPU's measured ceilings (numpy matmul FLOP/s, read bandwidth)
         predicting SmolLM2's measured train step and decode here: the ratios.
h200     the cost model predicting the decode steps measured on an H200 (RESULTS.md, 2026-11-24).
kernels  the 8B train step and reference forward on v5e-64 (16 x 4) compiled with the TPU
         kernels (splash attention, the Pallas log-prob kernel) and without them (XLA attention,
         XLA log-probs): per-chip memory from the compiler and the predicted seconds.

Compiles are cached (~/.cache/jaxrl_llm/aot), so a rerun prints in seconds; the first run of
`search` takes tens of minutes to hours on two cores (each 8B program compiles in 1-4 minutes).
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from machine import cpu_description  # noqa: E402

CACHE = os.path.join(os.path.expanduser("~"), ".cache", "jaxrl_llm", "aot")
POD_CONFIG = "experiments/configs/grpo_llama8b_pod.py"


def _header(what: str) -> None:
    import jax

    print(f"# {what}; {datetime.date.today()}; compiled on {cpu_description()}, jax "
          f"{jax.__version__}")  # fmt: skip


def search(args) -> None:
    """The planner's search for one topology."""
    from jaxrl_llm.scale import (
        CompileCache,
        Searcher,
        candidates,
        get_topology,
        phases_table,
        plans_table,
        workload_of,
    )  # fmt: skip
    from jaxrl_llm.stages import load_config

    topology = get_topology(args.topology)
    overrides = {"model.name": args.model} if args.model else {}
    workload = workload_of(load_config(POD_CONFIG, overrides))
    _header(f"placement search, {topology.name}")
    print(f"# {workload.describe()}")
    start = time.time()
    searcher = Searcher(workload, topology, cache=CompileCache(CACHE))
    cands = candidates(
        topology.num_chips,
        modes=args.modes.split(","),
        tensor_parallel=[int(x) for x in args.train_tp.split(",")],
        decode_tensor_parallel=[int(x) for x in args.decode_tp.split(",")],
    )
    plans = searcher.search(cands)
    print(f"\n## {topology.name}: {workload.describe()}\n")
    print(plans_table(plans, topology.chip, top=args.top))
    best = next((p for p in plans if p.fits), None)
    if best:
        print(f"\nPhases of the best plan ({best.candidate.label()}):\n")
        print(phases_table(best, topology.chip))
        print("\nchosen: " + " ".join(best.overrides()))
    print(f"\n# {len(plans)} placements in {time.time() - start:.0f} s")


# (model, topology, train mesh, decode mesh, decode rows) for the matrix: a slice each model
# needs, the planner's usual shapes (FSDP over data, TP up to the KV heads).
MATRIX = [
    ("llama-3.2-1b", "v5e-16", (8, 2), (2, 8), 256),
    ("llama-3.1-8b", "v5e-64", (16, 4), (8, 8), 256),
    ("qwen2.5-7b", "v5e-64", (16, 4), (16, 4), 256),
    ("gemma-3-27b", "v5p-128", (16, 4), (8, 8), 512),
    ("llama-3.1-70b", "v5p-512", (32, 8), (32, 8), 512),
]


def matrix(args) -> None:
    """Every phase of every model (PPO with a reference, a critic and a reward model, so that
    every role compiles), at one mesh each."""
    from jaxrl_llm.scale import (
        CompileCache,
        actor_train_program,
        analyze,
        critic_train_program,
        critic_values_program,
        get_topology,
        reference_program,
        reshard_programs,
        reward_model_program,
        rollout_program,
        sync_phases,
        workload_of,
    )  # fmt: skip
    from jaxrl_llm.scale import (
        chip as chip_of,
    )
    from jaxrl_llm.sharding import make_mesh
    from jaxrl_llm.stages import load_config

    _header("every phase compiled for a TPU slice")
    cache = CompileCache(CACHE)
    print("| model | slice | phase | mesh | runs / step | peak GiB / chip | args GiB | "
          "temp GiB | collective GiB / call | compile s |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|")
    only = set(args.models.split(",")) if args.models else None
    for name, topo_name, train, decode, rows in MATRIX:
        if only and name not in only:
            continue
        topology = get_topology(topo_name)
        config = load_config("experiments/configs/ppo_smollm2.py", {
            "model.name": name, "model.dtype": "bfloat16", "rollout.num_prompts": 64,
            "rollout.group_size": 16, "rollout.min_prompt_bucket": 1024,
            "rollout.max_new_tokens": 4096, "train.num_minibatches": 16, "loss.kl_beta": 0.05,
            "rewards.model": "<shape only>",
        })  # fmt: skip
        workload = workload_of(config)
        train_mesh = make_mesh(train, ("data", "model"), devices=topology.devices)
        decode_mesh = make_mesh(decode, ("data", "model"), devices=topology.devices)
        programs = [actor_train_program(workload, train_mesh),
                    rollout_program(workload, decode_mesh, rows=rows),
                    reference_program(workload, train_mesh, rows=rows),
                    critic_values_program(workload, train_mesh, rows=rows),
                    critic_train_program(workload, train_mesh),
                    reward_model_program(workload, train_mesh, rows=rows)]  # fmt: skip
        for program in programs:
            report = analyze(program, cache)
            comm = sum(t.bytes_received for t in report.collective_totals().values())
            mesh = "x".join(map(str, report.mesh.values()))
            print(f"| {name} | {topo_name} | {report.phase} | {mesh} | {report.runs} | "
                  f"{report.peak_bytes / 2**30:.2f} | {report.argument_bytes / 2**30:.2f} | "
                  f"{report.temp_bytes / 2**30:.2f} | {comm / 2**30:.3f} | "
                  f"{report.compile_seconds:.0f} |"
                  + (f" OOM: {report.out_of_memory[:90]}" if report.out_of_memory else ""),
                  flush=True)  # fmt: skip
        # The weight sync: its per-array programs, the peak without the other roles' state.
        sync = reshard_programs(workload, train_mesh, decode_mesh)
        reports = [analyze(p, cache) for p in sync.programs]
        chip = chip_of(topology.chip.name)
        phase = sync_phases(sync, reports, chip, split=False, learner_resident=0.0)["reshard"]
        comm = sum(t.bytes_received for t in phase.report.collective_totals().values())
        print(f"| {name} | {topo_name} | reshard ({len(reports)} programs run "
              f"{sum(p.runs for p in sync.programs)} times) | {train} -> {decode} | 1 | "
              f"{phase.peak_bytes / 2**30:.2f} | {phase.report.argument_bytes / 2**30:.2f} | "
              f"{phase.report.temp_bytes / 2**30:.2f} | {comm / 2**30:.3f} "
              f"({phase.seconds * 1e3:.1f} ms) | "
              f"{sum(r.compile_seconds for r in reports):.0f} |", flush=True)  # fmt: skip


# MaxText's published train-step figures (shapes from the configs they cite).
ANCHORS = [
    dict(
        name="llama-2-70b",
        topology="v5e-256",
        mesh=(256, 1),
        rows=512,
        length=2048,
        mfu=0.57,
        causal=False,  # as the 8B figure (assumed: this page gives no tokens/s)
        source="MaxText getting_started/Run_Llama2.md (Llama2-70b, v5e-256, bf16, 57% MFU); "
        "MaxText/configs/v5e/llama2_70b.sh (per_device_batch_size=2, max_target_length 2048)",
    ),
    dict(
        name="llama-3.1-8b",
        topology="v6e-256",
        mesh=(256, 1),
        rows=768,
        length=8192,
        mfu=0.4546,
        tokens_per_s=7207,
        causal=False,  # 7,207 tokens/s x 57.9 GFLOP / 918 TFLOP/s = 45.46%: the full square
        source="maxtext.readthedocs.io reference/models/tiering (Llama 3.1 8B, 256 v6e chips, "
        "BF16, SL=8192, 45.46% MFU, 7,207 tokens/s/device); per_device_batch_size 3 assumed",
    ),
]


def anchors(args) -> None:
    """Predicted train-step MFU at MaxText's shapes against the published MFU, both as MaxText
    counts useful work (`costs.model_flops`: forward and backward of the matmuls and the causal
    attention; remat's recomputation and the input embedding not counted). The published
    figures counted attention over the whole square (MaxText then): they are put on
    the causal count by the ratio of the two counts at the same tokens per second."""
    from jaxrl_llm.scale import (
        CompileCache,
        actor_train_program,
        analyze,
        costs,
        get_topology,
        workload_of,
    )
    from jaxrl_llm.sharding import make_mesh
    from jaxrl_llm.stages import load_config

    _header("train-step MFU predicted at MaxText's published shapes")
    print(
        "| model | slice | batch | compiled peak GiB / chip | predicted s / step | bound | "
        "predicted MFU | published MFU (as published) | published MFU (causal count) | "
        "published / predicted | source |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for anchor in ANCHORS:
        topology = get_topology(anchor["topology"])
        chip = topology.chip
        config = load_config(POD_CONFIG, {
            "model.name": anchor["name"], "rollout.num_prompts": anchor["rows"] // 2,
            "rollout.group_size": 2, "rollout.min_prompt_bucket": anchor["length"] // 2,
            "rollout.max_new_tokens": anchor["length"] // 2, "train.num_minibatches": 1,
        })  # fmt: skip
        workload = workload_of(config)
        mesh = make_mesh(anchor["mesh"], ("data", "model"), devices=topology.devices)
        report = analyze(actor_train_program(workload, mesh), CompileCache(CACHE))
        d, m = anchor["mesh"]
        split = costs.split_of(workload.model, anchor["rows"], d, m, fsdp=True)
        cost = costs.train_step_cost(
            workload.model, anchor["rows"], anchor["length"], split, remat="full",
            logprob_implementation="pallas_tpu", attention_kernel=True,  # as compiled: splash
        )._replace(comm_seconds=report.comm_seconds(chip))  # fmt: skip
        line = costs.roofline(cost, chip)
        shapes = (workload.model, anchor["rows"], anchor["length"])
        useful = costs.model_flops(*shapes)  # causal, no recomputation
        mfu = useful / (line.seconds * chip.peak_flops * topology.num_chips)
        # the published figure on the same count: same tokens / s, the causal FLOPs per token
        published = anchor["mfu"] * useful / costs.model_flops(*shapes, causal=anchor["causal"])
        print(f"| {anchor['name']} | {anchor['topology']} | {anchor['rows']} x {anchor['length']}"
              f" | {report.peak_bytes / 2**30:.2f} | {line.seconds:.2f} | {line.bound} | "
              f"{mfu:.1%} | {anchor['mfu']:.1%} | {published:.1%} | {published / mfu:.2f} | "
              f"{anchor['source']} |", flush=True)  # fmt: skip


def kernels(args) -> None:
    """The 8B train step and reference forward with and without the TPU kernels."""
    from jaxrl_llm.models.partitioning import layout_kernels
    from jaxrl_llm.scale import (
        CompileCache,
        actor_train_program,
        analyze,
        costs,
        get_topology,
        reference_program,
        workload_of,
    )  # fmt: skip
    from jaxrl_llm.sharding import make_mesh
    from jaxrl_llm.stages import load_config

    topology = get_topology("v5e-64")
    chip, shape = topology.chip, (16, 4)
    _header(f"Pallas kernels on and off, Llama-3.1-8B on {topology.name} {shape}")
    cache = CompileCache(CACHE)
    mesh = make_mesh(shape, ("data", "model"), devices=topology.devices)
    print("| phase | attention | log-probs | peak GiB / chip | temp GiB | predicted s / call | "
          "bound | compile s |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    workload = workload_of(load_config(POD_CONFIG))
    model, w = workload.model, workload
    for on in (True, False):
        splash, logprobs = ("splash", "pallas_tpu") if on else ("XLA", "xla")
        with layout_kernels(on):
            programs = [actor_train_program(workload, mesh), reference_program(workload, mesh)]
        for program in programs:
            report = analyze(program, cache)
            length = w.prompt_len + w.response_len
            if program.phase == "actor_train":
                rows = w.sequences // w.num_minibatches
                split = costs.split_of(model, rows, *shape, fsdp=True)
                cost = costs.train_step_cost(model, rows, length, split, remat="full",
                                             logprob_implementation=logprobs,
                                             attention_kernel=on)  # fmt: skip
            else:
                split = costs.split_of(model, w.sequences, *shape, fsdp=True)
                cost = costs.forward_cost(model, w.sequences, length, split,
                                          attention_kernel=on)  # fmt: skip
            line = costs.roofline(cost._replace(comm_seconds=report.comm_seconds(chip)), chip)
            oom = f" OOM: {report.out_of_memory[:120]}" if report.out_of_memory else ""
            print(f"| {program.phase} | {splash} | {logprobs} | "
                  f"{report.peak_bytes / 2**30:.2f} | {report.temp_bytes / 2**30:.2f} | "
                  f"{line.seconds:.3f} | {line.bound} | {report.compile_seconds:.0f} |{oom}",
                  flush=True)  # fmt: skip


def cpu(args) -> None:
    """SmolLM2's train step and decode, measured here, against the cost model with this CPU's
    measured ceilings."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from machine import best_seconds, matmul_rate, read_bandwidth

    from jaxrl_llm.algorithms.batch import PolicyBatch
    from jaxrl_llm.algorithms.policy_loss import PolicyLossConfig, policy_loss
    from jaxrl_llm.models import from_pretrained
    from jaxrl_llm.roles import Learner
    from jaxrl_llm.rollout import GenerationConfig, Generator
    from jaxrl_llm.scale import costs, cpu_chip
    from jaxrl_llm.sharding import make_mesh
    from jaxrl_llm.training import make_optimizer

    _header("the cost model on this CPU")
    flops, bandwidth = matmul_rate(), read_bandwidth()
    chip = cpu_chip(matmul_flops=flops, read_bandwidth=bandwidth, memory_bytes=24 * 2**30)
    print(
        f"# ceilings measured now: {flops / 1e9:.0f} GFLOP/s float32 matmul, "
        f"{bandwidth / 1e9:.1f} GB/s read"
    )
    print("| program | shape | measured s | predicted s | bound | measured / predicted |")
    print("|---|---|---|---|---|---|")
    model, _ = from_pretrained("smollm2-135m-instruct")
    config = model.config
    mesh = make_mesh((1, 1), ("data", "model"))
    # The main job's train step: 8 prompts x 4, 64-token bucket + 32 new tokens, full remat.
    rows, length = 32, 96
    loss_config = PolicyLossConfig(temperature=0.7, remat="full")
    actor = Learner(model, make_optimizer(learning_rate=1e-6),
                    lambda m, b: policy_loss(m, b, config=loss_config), mesh)  # fmt: skip
    rng = np.random.default_rng(0)
    tokens = rng.integers(1, config.vocab_size, size=(rows, length)).astype(np.int32)
    mask = np.zeros((rows, length), np.float32)
    mask[:, 64:] = 1
    batch = PolicyBatch(tokens=jnp.asarray(tokens), loss_mask=jnp.asarray(mask),
                        old_logp=jnp.full((rows, length), -1.0), ref_logp=jnp.zeros((rows, length)),
                        advantages=jnp.asarray(rng.normal(size=rows), jnp.float32))  # fmt: skip
    measured = best_seconds(lambda: actor.update(batch)["loss"], repeats=args.repeats)
    split = costs.split_of(config, rows, 1, 1, fsdp=False)
    predicted = costs.roofline(costs.train_step_cost(config, rows, length, split, remat="full"),
                               chip)  # fmt: skip
    print(f"| train step (GRPO loss, AdamW) | {rows} x {length} | {measured:.2f} | "
          f"{predicted.seconds:.2f} | {predicted.bound} | {measured / predicted.seconds:.2f} |",
          flush=True)  # fmt: skip
    actor = None  # frees the train state before decoding
    model, _ = from_pretrained("smollm2-135m-instruct")
    for batch_size in (1, 8, 32):
        gen = Generator(model, GenerationConfig(max_new_tokens=128, temperature=1.0, eos_ids=()))
        prompts = [list(rng.integers(1, config.vocab_size, size=46)) for _ in range(batch_size)]
        seconds = best_seconds(lambda p=prompts, g=gen: g(p, seed=0).tokens, repeats=args.repeats)
        split = costs.split_of(config, batch_size, 1, 1, fsdp=False)
        decode = costs.decode_cost(config, batch_size, batch_size, 64, 128, split)
        prefill = costs.roofline(decode.prefill, chip).seconds
        step = costs.roofline(decode.decode.scaled(1 / 128), chip)
        total = prefill + 128 * step.seconds
        print(
            f"| decode (prefill + 128 steps) | batch {batch_size}, 46-token prompts | "
            f"{seconds:.2f} | {total:.2f} | {step.bound} | {seconds / total:.2f} |",
            flush=True,
        )
    del jax


def h200(args) -> None:
    """The H200 decode table of RESULTS.md (2026-11-24) against the cost model."""
    from jaxrl_llm.models import ModelConfig
    from jaxrl_llm.scale import chip, costs

    _header("the cost model against RESULTS.md's H200 decode")
    h200 = chip("h200")
    smol = ModelConfig(
        vocab_size=49152,
        hidden_size=576,
        intermediate_size=1536,
        num_layers=30,
        num_heads=9,
        num_kv_heads=3,
        tie_word_embeddings=True,
        dtype="bfloat16",
    )
    measured_ms = {1: 1.31, 32: 1.18, 128: 1.61, 512: 2.77}  # RESULTS.md, ms per decode step
    print("| batch | measured ms / step | roofline ms | + 39 us / layer ms | measured / roofline |"
          " measured / with overhead |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    for batch, ms in measured_ms.items():
        split = costs.split_of(smol, batch, 1, 1, fsdp=False)
        decode = costs.decode_cost(smol, batch, batch, 64, 128, split)
        step = decode.decode.scaled(1 / 128)
        plain = costs.roofline(step._replace(layers_executed=0), h200).seconds * 1e3
        full = costs.roofline(step, h200).seconds * 1e3
        print(
            f"| {batch} | {ms:.2f} | {plain:.3f} | {full:.2f} | {ms / plain:.1f} | "
            f"{ms / full:.2f} |"
        )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("search")
    s.add_argument("topology")
    s.add_argument("--model", default=None)
    s.add_argument("--modes", default="colocated,split")
    s.add_argument("--train_tp", default="1,4,8")
    s.add_argument("--decode_tp", default="4,8")
    s.add_argument("--top", type=int, default=5)
    m = sub.add_parser("matrix")
    m.add_argument("--models", default="")
    sub.add_parser("anchors")
    c = sub.add_parser("cpu")
    c.add_argument("--repeats", type=int, default=3)
    sub.add_parser("h200")
    sub.add_parser("kernels")
    args = parser.parse_args()
    {
        "search": search,
        "matrix": matrix,
        "anchors": anchors,
        "cpu": cpu,
        "h200": h200,
        "kernels": kernels,
    }[args.command](args)


if __name__ == "__main__":
    main()
