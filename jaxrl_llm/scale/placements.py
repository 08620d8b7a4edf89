"""What the placement search tries and what it gives back: candidate placements, the row chunks
of the decode and the frozen forwards, the arithmetic prescreen, and evaluated plans.

    cands = candidates(64, tensor_parallel=(4,), decode_tensor_parallel=(8,))
    cands[0].label()       # "colocated 16x4 / 8x8"

Candidates (HybridFlow's mapping search over the RL dataflow, arXiv:2409.19256, and ReaLHF's
per-phase plans, in the runner's two placements, `jaxrl_llm.roles.placement`):

  colocated  every role on all N chips; the actor trains on a (data, model) mesh and the
             rollout decodes on a (data', model') mesh of the same chips (the weights resharded
             between the two layouts each step).
  split      the generator on a share f of the chips, the learner (actor, reference, critic)
             on the rest (weights copied across each step); synchronous, or asynchronous
             (`config.async_rl`) overlapping generation with training.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from jaxrl_llm.scale import costs
from jaxrl_llm.scale.analysis import ProgramReport
from jaxrl_llm.scale.workload import Workload

# The frozen forwards over a step's rows, chunked by `config.rollout.forward_batch`.
FORWARD_PHASES = ("reference", "critic_values", "reward_model")
# The weight sync's phases, one per chip group (`jaxrl_llm.scale.weight_sync`).
SYNC_PHASES = ("reshard", "reshard_receive")


class Candidate(NamedTuple):
    """A placement to evaluate.

    Attributes:
      mode: "colocated" or "split".
      train_mesh: (data, model) of the learner's mesh.
      rollout_mesh: (data, model) of the rollout's mesh.
      train_devices: (first device index, count) of the learner's devices in the topology.
      rollout_devices: (first, count) of the rollout's.
      decode_batch: rows per decode program (`config.rollout.decode_batch`; 0: all).
      forward_batch: rows per frozen forward (`config.rollout.forward_batch`; 0: all).
    """

    mode: str
    train_mesh: tuple[int, int]
    rollout_mesh: tuple[int, int]
    train_devices: tuple[int, int]
    rollout_devices: tuple[int, int]
    decode_batch: int = 0
    forward_batch: int = 0

    def label(self) -> str:
        """ "colocated 64x4 / 32x8" or "split 128/256: 32x4 | 16x8", with " (decode 256 rows)"
        and " (forwards 128 rows)" when the rollout or the frozen forwards run in chunks."""
        t = "x".join(map(str, self.train_mesh))
        r = "x".join(map(str, self.rollout_mesh))
        chunks = f" (decode {self.decode_batch} rows)" if self.decode_batch else ""
        chunks += f" (forwards {self.forward_batch} rows)" if self.forward_batch else ""
        if self.mode == "colocated":
            return f"colocated {t} / {r}{chunks}"
        total = self.train_devices[1] + self.rollout_devices[1]
        return f"split {self.rollout_devices[1]}/{total}: {t} | {r}{chunks}"


class PhaseResult(NamedTuple):
    """One phase of a plan, on one chip group (the learner's or the generator's).

    Attributes:
      phase: the phase name.
      report: the compiler's report (for the weight sync, its programs' reports merged by
        `weight_sync.merged_report`; None when the phase has no program).
      peak_bytes: per chip of its group: the phase's compiled peak plus what other roles keep
        on those chips then.
      seconds: predicted seconds per RL step (all its runs).
      roofline: the roofline of one run (of all its runs for the weight sync).
    """

    phase: str
    report: ProgramReport | None
    peak_bytes: float
    seconds: float
    roofline: costs.Roofline | None


class Plan(NamedTuple):
    """An evaluated candidate.

    Attributes:
      candidate: the placement.
      phases: `PhaseResult` by phase name.
      fits: every phase's peak within the HBM budget.
      reason: why it does not fit (empty when it does).
      step_seconds: predicted seconds per RL step (inf when it does not fit).
      decode_ms_per_token: the decode step's predicted latency floor.
    """

    candidate: Candidate
    phases: dict[str, PhaseResult]
    fits: bool
    reason: str
    step_seconds: float
    decode_ms_per_token: float

    @property
    def placement(self) -> dict:
        """The `config.placement` fields of this plan."""
        c = self.candidate
        return {"mode": c.mode, "train_mesh": c.train_mesh, "rollout_mesh": c.rollout_mesh}

    def chunks(self) -> dict[str, int]:
        """The chunk fields this plan chose: `rollout.decode_batch`, and `rollout.forward_batch`
        when the step has a frozen forward."""
        out = {"rollout.decode_batch": self.candidate.decode_batch}
        if any(p in self.phases for p in FORWARD_PHASES):
            out["rollout.forward_batch"] = self.candidate.forward_batch
        return out

    def overrides(self) -> list[str]:
        """Command-line overrides that select this plan (placement, and the chunks)."""
        out = [f"--config.placement.{k}={v!r}".replace(" ", "") for k, v in self.placement.items()]
        return out + [f"--config.{k}={v}" for k, v in self.chunks().items()]


def _divisors_pow2(n: int, options: Sequence[int]) -> list[int]:
    return [m for m in options if n % m == 0 and m <= n]


def candidates(
    num_chips: int,
    *,
    modes: Sequence[str] = ("colocated", "split"),
    tensor_parallel: Sequence[int] = (1, 2, 4, 8, 16),
    decode_tensor_parallel: Sequence[int] | None = None,
    split_fractions: Sequence[float] = (0.5,),
) -> list[Candidate]:
    """Every placement of the search over `num_chips` chips (see the module docstring):
    model-axis sizes `tensor_parallel` for the learner, `decode_tensor_parallel` (default the
    same) for the rollout."""
    decode_tp = tensor_parallel if decode_tensor_parallel is None else decode_tensor_parallel
    out = []
    if "colocated" in modes:
        for tm in _divisors_pow2(num_chips, tensor_parallel):
            for rm in _divisors_pow2(num_chips, decode_tp):
                out.append(
                    Candidate("colocated", (num_chips // tm, tm), (num_chips // rm, rm),
                              (0, num_chips), (0, num_chips))
                )  # fmt: skip
    if "split" in modes:
        for fraction in split_fractions:
            n_gen = int(round(num_chips * fraction))
            n_train = num_chips - n_gen
            if n_gen < 1 or n_train < 1:
                continue
            for tm in _divisors_pow2(n_train, tensor_parallel):
                for rm in _divisors_pow2(n_gen, decode_tp):
                    out.append(
                        Candidate("split", (n_train // tm, tm), (n_gen // rm, rm), (0, n_train),
                                  (n_train, n_gen))
                    )  # fmt: skip
    return out


def divisibility_notes(config, train_mesh: tuple[int, int], rollout_mesh: tuple[int, int]):
    """One line per model dimension that does not divide its mesh axis (the rule sets then
    replicate it on every shard of that axis: more memory and repeated work), naming the sizes
    that would divide."""
    notes = []

    def check(name: str, size: int, axis: str, axis_size: int, what: str):
        if axis_size > 1 and size % axis_size:
            fits = [m for m in (1, 2, 4, 8, 16, 32, 64) if size % m == 0 and m <= size]
            notes.append(
                f"{name}={size} does not divide over {axis}={axis_size} ({what}): it is "
                f"replicated there; {axis} in {fits} would split it."
            )

    for label, (data, model), fsdp in (
        ("train", train_mesh, True),
        ("decode", rollout_mesh, False),
    ):
        check("num_heads", config.num_heads, f"{label} model", model, "attention")
        check("num_kv_heads", config.num_kv_heads, f"{label} model", model, "KV heads and cache")
        check("intermediate_size", config.intermediate_size, f"{label} model", model, "MLP")
        check("vocab_size", config.vocab_size, f"{label} model", model, "unembedding")
        if fsdp:
            check("hidden_size", config.hidden_size, "train data", data, "FSDP weights")
    return list(dict.fromkeys(notes))


def estimate_peak_bytes(
    workload: Workload, phase: str, mesh: tuple[int, int], rows: int | None = None
) -> float:
    """A lower-bound estimate of a phase's per-device bytes, for the prescreen: the weights
    and optimizer state (train) or the weights and the KV cache of `rows` rows (rollout)
    alone, evenly split where their dimensions divide."""
    config = workload.model
    d, m = mesh
    b = 2 if config.dtype != "float32" else 4
    params = config.num_params() * b
    if phase == "actor_train":
        copies = 1 if workload.lora else 3  # parameters, Adam's two moments
        return params * copies / (d * m)
    if phase == "rollout":
        rows = rows or workload.sequences
        split = costs.split_of(config, rows, d, m, fsdp=False)
        cache = (
            rows / split.rows * workload.length
            * 2 * config.num_layers * config.num_kv_heads * config.head_dim * b / split.heads
        )  # fmt: skip
        return params / m + cache
    return 0.0


def row_chunks(rows: int, smallest: int) -> list[int]:
    """Rows per program to try, largest first: 0 (all `rows` at once), then halves that divide
    `rows`, down to `smallest`."""
    out, chunk = [0], rows // 2
    while chunk >= max(smallest, 1) and rows % chunk == 0:
        out.append(chunk)
        chunk //= 2
    return out


def decode_batches(workload: Workload, data: int) -> list[int]:
    """Decode chunks to try, largest first: every row of the step, then halves, while each
    chunk keeps at least one row per "data" shard and whole groups (0 means all)."""
    return row_chunks(workload.sequences, max(data, workload.group_size))


def forward_batches(workload: Workload, data: int) -> list[int]:
    """Frozen-forward chunks to try, largest first: every row of the step, then halves, while
    each chunk keeps at least one row per "data" shard (0 means all)."""
    return row_chunks(workload.sequences, data)
