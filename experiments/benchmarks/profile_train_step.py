"""Where the GRPO train step's time goes: one `jax.profiler` trace, read back and summed by part.

The step of `grpo_step.py`'s packed run: SmolLM2-135M's shapes (random weights: timing does not
depend on them), 32 sequences of 92 tokens (a 48-token prompt and the 44-token mean completion)
packed 2 to a row into rows of 192 columns (`--rows 8 --width 384`: 4 to a row, as the
benchmark packed before this profile), the GRPO policy loss with the fused log-prob kernel,
`config.train.remat` ("full"), AdamW, one update. The compiled step runs `--repeats` times under
`jax.profiler.trace` (the trace directory opens in TensorBoard's or Perfetto's trace viewer);
then the trace is read back with `jax.profiler.ProfileData` and every XLA:CPU thunk event of the
step's module (loops and calls left out: their events enclose their bodies') is attributed,
through the compiled HLO's metadata (the Python functions each instruction was traced from), to
one of:

  matmuls          dots from the model's projections, MLP and unembedding (forward, backward)
  attention        dots, softmax and masking inside `layers.grouped_query_attention`
  log-prob kernel  the fused log-prob / entropy kernel (`kernels/logprobs`)
  optimizer        optax's AdamW and the gradient clipping
  other device     norms, RoPE, activations, residual adds, the loss, the scan's copies
  host             the step's wall time beyond the summed device events (dispatch, waits);
                   XLA:CPU runs independent thunks side by side, so the sum can exceed the wall

    .venv/bin/python experiments/benchmarks/profile_train_step.py --trace-dir /tmp/train_trace
"""

from __future__ import annotations

import argparse
import collections
import glob
import os
import re
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxrl_llm.algorithms.batch import PolicyBatch, pack_batch
from jaxrl_llm.algorithms.policy_loss import PolicyLossConfig, policy_loss
from jaxrl_llm.config import grpo_config
from jaxrl_llm.models import resolve_model_path
from jaxrl_llm.models.gguf_loader import config_from_gguf, read_gguf
from jaxrl_llm.models.transformer import init_model
from jaxrl_llm.training.train_step import create_train_state, make_train_step

PARTS = ("matmuls", "attention", "log-prob kernel", "optimizer", "other device")
_METADATA = re.compile(r"^\s*(?:ROOT )?%?([\w.\-]+) = .*?metadata=\{([^}]*)\}", re.MULTILINE)
_OPCODE = re.compile(
    r"^\s*(?:ROOT )?%?([\w.\-]+) = [^=\n]*? (while|conditional|call)\(", re.MULTILINE
)
_FIELD = re.compile(r'(\w+)="?([^" ]+)"?')


def _table(hlo_text: str, title: str) -> dict[int, str]:
    """A numbered section of the HLO text's stack-frame tables ("FileNames", "StackFrames", ...)."""
    start = hlo_text.find("\n" + title + "\n")
    rows = {}
    if start < 0:
        return rows
    for line in hlo_text[start + len(title) + 2 :].splitlines():
        number, _, rest = line.partition(" ")
        if not number.isdigit():
            break
        rows[int(number)] = rest.strip().strip('"').strip("{}")
    return rows


def instruction_sources(hlo_text: str) -> dict[str, tuple[str, str, bool]]:
    """{instruction: (the Python functions of its traceback joined by "/", files, is_dot)}.

    Optimized HLO keeps a `stack_frame_id` per instruction and, at the end, the tables of
    frames, locations, function and file names it points into.
    """
    files, functions = _table(hlo_text, "FileNames"), _table(hlo_text, "FunctionNames")
    locations = {k: dict(_FIELD.findall(v)) for k, v in _table(hlo_text, "FileLocations").items()}
    frames = {k: dict(_FIELD.findall(v)) for k, v in _table(hlo_text, "StackFrames").items()}

    def stack(frame_id: int) -> tuple[str, str]:
        names, paths, seen = [], [], set()
        while frame_id in frames and frame_id not in seen:
            seen.add(frame_id)
            location = locations.get(int(frames[frame_id]["file_location_id"]), {})
            names.append(functions.get(int(location.get("function_name_id", 0)), ""))
            paths.append(files.get(int(location.get("file_name_id", 0)), ""))
            frame_id = int(frames[frame_id]["parent_frame_id"])
        return "/".join(names), " ".join(paths)

    out = {}
    for match in _METADATA.finditer(hlo_text):
        name, meta = match.group(1), dict(_FIELD.findall(match.group(2)))
        line = match.group(0)
        is_dot = " dot(" in line or "ynn_fusion" in name or "__onednn$matmul" in line
        funcs, paths = stack(int(meta.get("stack_frame_id", 0)))
        out[name] = (meta.get("op_name", "") + "|" + funcs, paths, is_dot)
    return out


def container_instructions(hlo_text: str) -> set[str]:
    """Instructions whose thunk events enclose other events (loops, calls): not counted."""
    return {m.group(1) for m in _OPCODE.finditer(hlo_text)}


def part_of(op_name: str, source_file: str, is_dot: bool) -> str:
    """The part an instruction belongs to, from the Python source it was traced from."""
    if "kernels/logprobs" in source_file:
        return "log-prob kernel"
    if "optax" in source_file:
        return "optimizer"
    if "grouped_query_attention" in op_name:
        return "attention"
    if is_dot:
        return "matmuls"
    return "other device"


def packed_batch(config, rows: int, width: int, seq_len: int, prompt_len: int):
    """`rows` x `width` packed rows of random sequences of `seq_len` tokens (GRPO's fields)."""
    per_row = width // seq_len
    n = rows * per_row
    rng = np.random.default_rng(0)
    tokens = jnp.asarray(rng.integers(0, config.vocab_size, (n, seq_len)), jnp.int32)
    mask = jnp.asarray(np.arange(seq_len)[None] >= prompt_len, jnp.float32).repeat(n, 0)
    batch = PolicyBatch(
        tokens=tokens,
        loss_mask=mask,
        old_logp=jnp.full((n, seq_len), -2.0, jnp.float32),
        ref_logp=jnp.zeros((n, seq_len), jnp.float32),
        advantages=jnp.asarray(rng.standard_normal(n), jnp.float32),
    )
    packed, _ = pack_batch(batch, np.full((n,), seq_len), width=width)
    return packed


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--width", type=int, default=192)
    parser.add_argument("--sequence", type=int, default=92, help="tokens per packed sequence")
    parser.add_argument("--prompt", type=int, default=48)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--trace-dir", default="/tmp/jaxrl_llm_train_trace")
    args = parser.parse_args()
    if not getattr(args, "worker", None):  # the parent prints the header, once
        from machine import benchmark_header

        print(benchmark_header("profile_train_step.py"), flush=True)

    run_config = grpo_config()
    model_config = config_from_gguf(read_gguf(resolve_model_path(run_config.model.name)))
    model = init_model(model_config)
    optimizer = optax.chain(
        optax.clip_by_global_norm(run_config.optimizer.max_grad_norm),
        optax.adamw(1e-6, b1=0.9, b2=0.99, weight_decay=0.0),
    )
    graphdef, state = create_train_state(model, optimizer)
    del model
    loss_config = PolicyLossConfig(remat=run_config.train.remat, temperature=1.0)
    step = make_train_step(graphdef, optimizer, lambda m, b: policy_loss(m, b, config=loss_config))
    batch = packed_batch(model_config, args.rows, args.width, args.sequence, args.prompt)
    compiled = step.lower(state, batch).compile()
    hlo_text = compiled.as_text()
    sources = instruction_sources(hlo_text)
    containers = container_instructions(hlo_text)
    module = re.search(r"HloModule (\S+?)[,\s]", hlo_text).group(1)
    box = [state]

    def run():
        box[0], metrics = compiled(box[0], batch)
        jax.block_until_ready(metrics)

    run()  # warm-up
    walls = []
    jax.profiler.start_trace(args.trace_dir)
    for _ in range(args.repeats):
        t = time.perf_counter()
        run()
        walls.append(time.perf_counter() - t)
    jax.profiler.stop_trace()

    path = max(glob.glob(os.path.join(args.trace_dir, "**", "*.xplane.pb"), recursive=True),
               key=os.path.getmtime)  # fmt: skip
    profile = jax.profiler.ProfileData.from_file(path)
    by_part = collections.Counter()
    by_op = collections.Counter()
    unknown = 0.0
    for plane in profile.planes:
        for line in plane.lines:
            for event in line.events:
                stats = dict(event.stats)
                op = stats.get("hlo_op")
                if op is None or op in containers or stats.get("hlo_module") != module:
                    continue
                seconds = event.duration_ns / 1e9 / args.repeats
                source = sources.get(op)
                if source is None:
                    unknown += seconds
                    by_part["other device"] += seconds
                else:
                    by_part[part_of(*source)] += seconds
                by_op[op] += seconds
    wall = float(np.mean(walls))
    device = sum(by_part.values())
    print(
        f"\nGRPO train step profile: {args.rows} rows x {args.width} columns "
        f"({args.rows * (args.width // args.sequence)} sequences of {args.sequence} tokens), "
        f"SmolLM2-135M shapes float32, remat {run_config.train.remat}; mean wall "
        f"{wall:.2f} s over {args.repeats} profiled steps; trace in {args.trace_dir}"
    )
    print("| part | s per step | share of summed device time |")
    print("|---|---|---|")
    for part in PARTS:
        print(f"| {part} | {by_part[part]:.2f} | {100 * by_part[part] / device:.0f}% |")
    print(f"| device events summed | {device:.2f} | 100% |")
    print(f"| host (wall - device, if positive) | {max(wall - device, 0):.2f} | - |")
    print(f"\n({unknown:.2f} s of events had no HLO metadata and count as 'other device'.)")
    print("Top instructions:")
    for op, seconds in by_op.most_common(12):
        source = sources.get(op, ("?", "?", False))
        where = source[0].split("|")[-1].split("/")[:3]
        print(f"  {seconds:7.3f} s  {op:<24} {part_of(*source):<16} {' <- '.join(where)}")


if __name__ == "__main__":
    main()
