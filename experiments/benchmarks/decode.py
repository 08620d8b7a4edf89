"""Decode throughput of `jaxrl_llm.rollout` against peers and this machine's limits.

    .venv/bin/python experiments/benchmarks/decode.py               # batches 1, 8, 32, 64
    .venv/bin/python experiments/benchmarks/decode.py --quick       # batches 1, 8; 16 new tokens
    .venv/bin/python experiments/benchmarks/decode.py --batches 32 --no-peers
    .venv/bin/python experiments/benchmarks/decode.py --batches 32 --variable-only

For every batch size B: B prompts of exactly `--prompt-tokens` tokens (different texts), sampled
at temperature 1 for exactly `--new-tokens` tokens (EOS disabled, so every engine does the same
work), SmolLM2-135M-Instruct in float32. New tokens per second = B * new_tokens / wall time of
one whole generate call (prefill included, compile excluded: our first call compiles, the next
`--repeats` are timed and the best is kept; "compile" is first minus best). Beside it, in the
same run (each peer in a subprocess of its own, so torch's threads never share a process with
XLA's):

  transformers  `model.generate(do_sample=True, min_new_tokens=max_new_tokens=N)` on the same
                GGUF (dequantised to float32), if transformers is importable (the `peers` extra).
  llama.cpp     llama-cpp-python, if importable, through its C API: the GGUF dequantised to
                float32 (same weights, same precision), B sequences in one `llama_batch` per
                step over one KV cache, llama.cpp's own sampler (`LlamaCppBatched`).
  variable      one more row ("32 var", `--variable-batch`): 32 prompts whose completions stop
                at lengths drawn from a measured distribution: in the same run, our engine
                samples 4 x 32 completions of the main job's task (chain_sum chat prompts,
                temperature 1, at most `--new-tokens`, ending at EOS) and each benchmark prompt
                gets a budget drawn from those lengths (seeded). Every engine decodes each
                prompt to exactly its budget (EOS disabled) and is scored in tokens kept per
                second, sum(budgets) / wall: ours with compaction (and without, for the
                saving), transformers with a per-row stopping criterion (finished rows stay in
                the batch until the longest ends), llama.cpp's batched API submitting only the
                sequences still running.
  limit         the CPU roofline: a step costs at least max(weight bytes / read bandwidth,
                FLOPs / matmul rate), with the bandwidth of a read-only reduction over 1 GiB on
                every core (`machine.read_bandwidth`; a single-threaded copy read low, and
                llama.cpp beat the limit it gave) and the rate of a numpy float32 2048^3
                matmul, both measured here.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import sys
import tempfile
import time

import jax
import numpy as np

from jaxrl_llm.models import from_pretrained, resolve_model_path
from jaxrl_llm.rollout import GenerationConfig, Generator

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from machine import cpu_description, matmul_rate, read_bandwidth, run_for_result  # noqa: E402

_TOPICS = [
    "a fox who learns to paint", "the history of bread", "why the sky is blue",
    "a robot lost in a library", "how volcanoes form", "a letter to a future self",
    "the rules of chess", "a city under the sea", "how bees make honey", "a day on Mars",
]  # fmt: skip


def make_prompts(tokenizer, batch: int, length: int) -> list[list[int]]:
    """`batch` different prompts of exactly `length` tokens (text repeated, then truncated)."""
    prompts = []
    for b in range(batch):
        text = f"Request {b}: write a short essay about {_TOPICS[b % len(_TOPICS)]}. "
        ids = tokenizer.encode(text * (1 + length // 8))[:length]
        assert len(ids) == length
        prompts.append(ids)
    return prompts


# --- machine limits ----------------------------------------------------------------------------
def roofline_tokens_per_second(config, batch, prompt_len, new_tokens, bandwidth, flop_rate):
    """Upper bound on new tokens / s: prefill FLOPs + per-step max(bytes read, FLOPs).

    A step reads every weight once and the float32 keys and values of every cached position.
    """
    n_params = config.num_params()
    weight_bytes = 4 * n_params
    embed = config.vocab_size * config.hidden_size
    body = n_params - embed * (1 if config.tie_word_embeddings else 2)
    head_flops = 2 * embed
    attn_per_pos = 4 * config.num_layers * config.num_heads * config.head_dim  # QK^T and AV
    cache_bytes_per_pos = 2 * 4 * config.num_layers * config.num_kv_heads * config.head_dim
    prefill_flops = (
        batch * prompt_len * (2 * body + attn_per_pos * prompt_len / 2) + batch * head_flops
    )
    step_time = 0.0
    for j in range(1, new_tokens):
        flops = batch * (2 * body + head_flops + attn_per_pos * (prompt_len + j))
        read = weight_bytes + batch * cache_bytes_per_pos * (prompt_len + j)
        step_time += max(read / bandwidth, flops / flop_rate)
    total = prefill_flops / flop_rate + step_time
    return batch * new_tokens / total


# --- engines -----------------------------------------------------------------------------------
def bench_ours(model, prompts, new_tokens, repeats, budgets=None, compaction=True):
    """(tokens kept/s of the best of `repeats` timed calls, compile seconds) of `Generator`.

    `budgets`: tokens per prompt (None: `new_tokens` each).
    """
    config = GenerationConfig(
        max_new_tokens=new_tokens, temperature=1.0, eos_ids=(), compaction=compaction
    )
    gen = Generator(model, config)
    budgets = [new_tokens] * len(prompts) if budgets is None else list(budgets)
    t = time.perf_counter()
    jax.block_until_ready(gen(prompts, seed=0, max_new_tokens=budgets))
    first = time.perf_counter() - t
    runs = []
    for r in range(repeats):
        t = time.perf_counter()
        rollout = jax.block_until_ready(gen(prompts, seed=1 + r, max_new_tokens=budgets))
        runs.append(time.perf_counter() - t)
        assert np.asarray(rollout.lengths).tolist() == budgets
    return sum(budgets) / min(runs), first - min(runs)


def measured_lengths(model, tokenizer, new_tokens: int, batches: int = 4) -> list[int]:
    """Completion lengths of the main job's task: `batches` x 32 chain_sum completions
    (8 prompts x 4, chat template, temperature 1, at most `new_tokens`, ending at EOS)."""
    from jaxrl_llm.data import ReasoningGymSource
    from jaxrl_llm.rollout.chat import chat_generator, prompt_ids

    source = ReasoningGymSource("chain_sum", seed=0, size=8 * batches, min_terms=2, max_terms=2)
    gen = chat_generator(model, tokenizer, max_new_tokens=new_tokens, temperature=1.0)
    lengths = []
    for b in range(batches):
        _, ids = prompt_ids(tokenizer, [source[i] for i in range(8 * b, 8 * b + 8)])
        rollout = gen([p for p in ids for _ in range(4)], seed=b)
        lengths += np.asarray(rollout.lengths).tolist()
    return lengths


def load_transformers(path: str):
    """The same GGUF in transformers (float32), or None when transformers is not importable."""
    try:
        import torch
        import transformers
    except ImportError:
        return None
    torch.set_num_threads(os.cpu_count() or 1)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        os.path.dirname(path), gguf_file=os.path.basename(path), dtype=torch.float32
    )
    model.eval()
    return model


def _budget_stop(prompt_len: int, budgets):
    """A transformers stopping criterion: row b is done after budgets[b] new tokens."""
    import torch
    import transformers

    limits = torch.tensor(budgets)

    class BudgetStop(transformers.StoppingCriteria):
        def __call__(self, input_ids, scores, **kwargs):
            return (input_ids.shape[1] - prompt_len) >= limits

    return transformers.StoppingCriteriaList([BudgetStop()])


def bench_transformers(hf_model, prompts, new_tokens, repeats, budgets=None):
    """Tokens/s of transformers `generate` with sampling, at its best torch thread count.

    A short warm-up generate runs with 1 and with all cores; the faster count is used (on a
    shared, oversubscribed CPU torch's spinning OpenMP threads can be several times slower than
    one thread, and the peer deserves its best setting).
    """
    import torch

    ids = torch.tensor(prompts, dtype=torch.long)
    kwargs = dict(do_sample=True, temperature=1.0, top_k=0, top_p=1.0, pad_token_id=0)
    kwargs["attention_mask"] = torch.ones_like(ids)
    with torch.inference_mode():
        timings = {}
        for threads in sorted({1, os.cpu_count() or 1}):
            torch.set_num_threads(threads)
            hf_model.generate(ids, max_new_tokens=2, min_new_tokens=2, **kwargs)
            t = time.perf_counter()
            hf_model.generate(ids, max_new_tokens=4, min_new_tokens=4, **kwargs)
            timings[threads] = time.perf_counter() - t
        torch.set_num_threads(min(timings, key=timings.get))
        runs = []
        if budgets is None:
            limits = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens)
        else:  # no EOS; each row stops at its budget, the batch at the longest
            stop = _budget_stop(ids.shape[1], budgets)
            limits = dict(max_new_tokens=max(budgets), stopping_criteria=stop, eos_token_id=None)
        for _ in range(repeats):
            t = time.perf_counter()
            out = hf_model.generate(ids, **limits, **kwargs)
            runs.append(time.perf_counter() - t)
            assert out.shape[1] == ids.shape[1] + (new_tokens if budgets is None else max(budgets))
    kept = len(prompts) * new_tokens if budgets is None else sum(budgets)
    return kept / min(runs)


def float32_gguf(src: str, dst: str) -> str:
    """Writes a copy of the GGUF at `src` with every tensor dequantised to float32 (same keys)."""
    import gguf

    reader = gguf.GGUFReader(src)
    arch = reader.get_field(gguf.Keys.General.ARCHITECTURE).contents()
    writer = gguf.GGUFWriter(dst, arch)
    for field in reader.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue
        if field.name == gguf.Keys.General.FILE_TYPE:
            writer.add_file_type(gguf.LlamaFileType.ALL_F32)
            continue
        kind = field.types[0]
        sub = field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), kind, sub_type=sub)
    for tensor in reader.tensors:
        values = gguf.quants.dequantize(tensor.data, tensor.tensor_type).astype(np.float32)
        writer.add_tensor(tensor.name, values)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return dst


class LlamaCppBatched:
    """llama.cpp (through llama-cpp-python's C API) decoding B sequences in one batch per step.

    The float32 copy of the GGUF (`float32_gguf`) is loaded, so llama.cpp reads the same weights
    in the same precision as the other engines. Each step submits one `llama_batch` of B tokens
    (sequence ids 0..B-1 over one KV cache); the prompts are prefilled together in chunks of
    `n_batch` tokens; tokens are drawn by llama.cpp's own sampler (`dist`, temperature 1, no
    filtering), one sampler chain per sequence.
    """

    def __init__(self, path: str, max_batch: int, max_len: int):
        import llama_cpp

        self.lib = llama_cpp
        llama_cpp.llama_backend_init()
        model_params = llama_cpp.llama_model_default_params()
        self.model = llama_cpp.llama_model_load_from_file(path.encode(), model_params)
        if not self.model:
            raise RuntimeError(f"llama.cpp could not load {path}")
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = max_batch * max_len
        params.n_batch = params.n_ubatch = 512
        params.n_seq_max = max_batch
        params.n_threads = params.n_threads_batch = os.cpu_count()
        self.ctx = llama_cpp.llama_init_from_model(self.model, params)
        if not self.ctx:
            raise RuntimeError("llama.cpp could not create a context")
        self.n_batch = params.n_batch
        self.batch = llama_cpp.llama_batch_init(max(self.n_batch, max_batch), 0, 1)

    def _decode(self, entries):
        """Submits [(token, position, sequence, wants_logits)]; returns their batch indices."""
        b = self.batch
        b.n_tokens = len(entries)
        for i, (token, pos, seq, logits) in enumerate(entries):
            b.token[i], b.pos[i], b.n_seq_id[i] = token, pos, 1
            b.seq_id[i][0] = seq
            b.logits[i] = logits
        rc = self.lib.llama_decode(self.ctx, b)
        if rc != 0:
            raise RuntimeError(f"llama_decode returned {rc}")

    def generate(self, prompts, new_tokens: int, seed: int = 0, budgets=None) -> int:
        """Samples `new_tokens` tokens (or `budgets[s]`) for every prompt; returns how many were
        produced. A step submits only the sequences that have not reached their budget."""
        budgets = [new_tokens] * len(prompts) if budgets is None else list(budgets)
        lib = self.lib
        lib.llama_memory_clear(lib.llama_get_memory(self.ctx), True)
        chains = []
        for s in range(len(prompts)):
            chain = lib.llama_sampler_chain_init(lib.llama_sampler_chain_default_params())
            lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_dist(seed + s))
            chains.append(chain)
        entries = [
            (tok, pos, s, pos == len(p) - 1)
            for s, p in enumerate(prompts)
            for pos, tok in enumerate(p)
        ]
        last = [0] * len(prompts)
        # Prefill in chunks; a chunk's logits live until the next llama_decode, so each
        # sequence's first token is sampled right after the chunk holding its last prompt token.
        for start in range(0, len(entries), self.n_batch):
            chunk = entries[start : start + self.n_batch]
            self._decode(chunk)
            for i, (_, _, s, wants) in enumerate(chunk):
                if wants:
                    last[s] = lib.llama_sampler_sample(chains[s], self.ctx, i)
        produced = len(prompts)
        for step in range(1, max(budgets)):
            live = [s for s in range(len(prompts)) if budgets[s] > step]
            self._decode([(last[s], len(prompts[s]) + step - 1, s, True) for s in live])
            for i, s in enumerate(live):
                last[s] = lib.llama_sampler_sample(chains[s], self.ctx, i)
            produced += len(live)
        for chain in chains:
            lib.llama_sampler_free(chain)
        return produced


def load_llama_cpp(path: str, cases: dict, new_tokens: int):
    """`LlamaCppBatched` on a float32 copy of the GGUF, or None when llama_cpp is missing."""
    if importlib.util.find_spec("llama_cpp") is None:
        return None
    f32 = os.path.join(tempfile.mkdtemp(prefix="llama_f32_"), "model-f32.gguf")
    float32_gguf(path, f32)
    max_batch = max(len(c["prompts"]) for c in cases.values())
    max_len = max(len(p) for c in cases.values() for p in c["prompts"]) + new_tokens
    return LlamaCppBatched(f32, max_batch, max_len)


def bench_llama_cpp(engine: LlamaCppBatched, prompts, new_tokens, repeats, budgets=None):
    """Tokens kept/s of batched llama.cpp: best of 1 + `repeats` whole generate calls."""
    kept = len(prompts) * new_tokens if budgets is None else sum(budgets)
    runs = []
    for r in range(1 + repeats):
        t = time.perf_counter()
        produced = engine.generate(prompts, new_tokens, seed=r, budgets=budgets)
        runs.append(time.perf_counter() - t)
        assert produced == kept
    return kept / min(runs)


def _fmt(x, digits=1):
    return "-" if x is None else f"{x:.{digits}f}"


def run_peer(name: str, path: str, cases: dict, new_tokens: int, repeats: int) -> dict:
    """{case: tokens kept/s} of one peer, measured in this process (called in a subprocess).

    `cases`: {name: {"prompts": [[ids]], "budgets": None or [tokens per prompt]}}.
    """
    if name == "transformers":
        engine, bench = load_transformers(path), bench_transformers
    else:
        engine = load_llama_cpp(path, cases, new_tokens)
        bench = bench_llama_cpp
    return {
        case: bench(engine, c["prompts"], new_tokens, repeats, budgets=c["budgets"])
        for case, c in cases.items()
    }


def peer_in_subprocess(name: str, args, cases: dict, new_tokens: int) -> dict | None:
    """Runs `run_peer` in a fresh process (no JAX thread pools beside torch's), or None."""
    module = {"transformers": "transformers", "llama_cpp": "llama_cpp"}[name]
    if importlib.util.find_spec(module) is None:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        prompts_file = os.path.join(tmp, "prompts.json")
        with open(prompts_file, "w") as f:
            json.dump(cases, f)
        cmd = [sys.executable, os.path.abspath(__file__), "--peer", name, "--model", args.model]
        cmd += ["--prompts-file", prompts_file, "--new-tokens", str(new_tokens)]
        cmd += ["--repeats", str(args.repeats)]
        return run_for_result(cmd, "PEER_RESULT", name)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batches", default="1,8,32,64", help="comma-separated batch sizes")
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--prompt-tokens", type=int, default=40)
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--quick", action="store_true", help="batches 1,8 and 16 new tokens")
    parser.add_argument("--no-peers", action="store_true", help="skip transformers and llama.cpp")
    parser.add_argument("--repeats", type=int, default=2, help="timed runs; the best is reported")
    parser.add_argument(
        "--variable-batch", type=int, default=32, help="rows of the variable-length case (0: none)"
    )
    parser.add_argument(
        "--variable-only", action="store_true", help="only the variable-length case"
    )
    parser.add_argument("--peer", choices=["transformers", "llama_cpp"], help=argparse.SUPPRESS)
    parser.add_argument("--prompts-file", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    path = resolve_model_path(args.model)
    if args.peer:  # subprocess mode: measure one peer on the cases of the parent process
        with open(args.prompts_file) as f:
            cases = json.load(f)
        result = run_peer(args.peer, path, cases, args.new_tokens, args.repeats)
        print("PEER_RESULT " + json.dumps(result), flush=True)
        return
    batches = [1, 8] if args.quick else [int(b) for b in args.batches.split(",")]
    batches = [] if args.variable_only else batches
    new_tokens = 16 if args.quick else args.new_tokens

    bandwidth, flop_rate = read_bandwidth(), matmul_rate()
    model, tokenizer = from_pretrained(args.model)
    cases = {
        str(b): {"prompts": make_prompts(tokenizer, b, args.prompt_tokens), "budgets": None}
        for b in batches
    }
    lengths = []
    if args.variable_batch:
        lengths = measured_lengths(model, tokenizer, new_tokens)
        budgets = np.random.default_rng(0).choice(lengths, size=args.variable_batch).tolist()
        cases[f"{args.variable_batch} var"] = {
            "prompts": make_prompts(tokenizer, args.variable_batch, args.prompt_tokens),
            "budgets": [int(x) for x in budgets],
        }
    peers = {}
    for name in ("transformers", "llama_cpp"):
        peers[name] = None if args.no_peers else peer_in_subprocess(name, args, cases, new_tokens)
    config = model.config
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"# decode benchmark {datetime.date.today()} | {cpu_description()}, load average "
        f"{load:.1f} | jax {jax.__version__} | {args.model} "
        f"float32, {config.num_params() / 1e6:.1f}M params, {4 * config.num_params() / 1e6:.0f} MB\n"
        f"# prompt {args.prompt_tokens} tokens, {new_tokens} new tokens, temperature 1 | "
        f"read bandwidth {bandwidth / 1e9:.1f} GB/s, numpy matmul {flop_rate / 1e9:.0f} GFLOP/s\n"
        f"# transformers: {'measured' if peers['transformers'] else 'not importable / skipped'}, "
        f"llama-cpp-python: {'measured' if peers['llama_cpp'] else 'not importable / skipped'}",
        flush=True,
    )
    if lengths:
        budgets = cases[f"{args.variable_batch} var"]["budgets"]
        print(
            f"# measured completion lengths ({len(lengths)} chain_sum completions): mean "
            f"{np.mean(lengths):.1f}, median {np.median(lengths):.0f}, max {max(lengths)}; "
            f"the variable case's budgets: mean {np.mean(budgets):.1f}, max {max(budgets)}"
        )
    header = (
        "| batch | ours tok/s | compile s | transformers tok/s | llama.cpp tok/s | limit tok/s "
        "| ours / transformers | ours / llama.cpp | ours / limit |"
    )
    print(header)
    print("|" + "---|" * (header.count("|") - 1), flush=True)
    ratio = lambda a, b: None if a is None or b is None else a / b
    for case, c in cases.items():
        prompts, budgets = c["prompts"], c["budgets"]
        ours, compile_s = bench_ours(model, prompts, new_tokens, args.repeats, budgets=budgets)
        hf = (peers["transformers"] or {}).get(case)
        lc = (peers["llama_cpp"] or {}).get(case)
        limit = None
        if budgets is None:
            limit = roofline_tokens_per_second(
                config, len(prompts), args.prompt_tokens, new_tokens, bandwidth, flop_rate
            )
        print(
            f"| {case} | {ours:.1f} | {compile_s:.0f} | {_fmt(hf)} | {_fmt(lc)} | {_fmt(limit, 0)} "
            f"| {_fmt(ratio(ours, hf), 2)} | {_fmt(ratio(ours, lc), 2)} "
            f"| {_fmt(ratio(ours, limit), 2)} |",
            flush=True,
        )
        if budgets is not None:
            plain, _ = bench_ours(
                model, prompts, new_tokens, args.repeats, budgets=budgets, compaction=False
            )
            print(
                f"# {case}: tokens kept per second; ours without compaction {plain:.1f} "
                f"(compaction {ours / plain:.2f}x)",
                flush=True,
            )


if __name__ == "__main__":
    main()
