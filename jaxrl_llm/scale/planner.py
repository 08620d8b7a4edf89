"""The placement search: meshes per phase, checked by the compiler, ranked by predicted step time.

    plans = search(workload, get_topology("v5e-256"), cache=CompileCache(...))
    best = next(p for p in plans if p.fits)
    best.placement   # {"mode": "colocated", "train_mesh": (64, 4), "rollout_mesh": (32, 8)}

Candidates (HybridFlow's mapping search over the RL dataflow, arXiv:2409.19256, and ReaLHF's
per-phase plans, in the runner's two placements, `jaxrl_llm.roles.placement`):

  colocated  every role on all N chips; the actor trains on a (data, model) mesh and the
             rollout decodes on a (data', model') mesh of the same chips (the weights resharded
             between the two layouts each step).
  split      the generator on a share f of the chips, the learner (actor, reference, critic)
             on the rest (weights copied across each step); synchronous, or asynchronous
             (`config.async_rl`) overlapping generation with training.

Each distinct (phase, mesh) is compiled once (`analysis.analyze`, cached). A plan fits when every
phase's compiled peak, plus what the other roles keep resident on the same chips at that time,
is within the chip's HBM less `reserve`; a plan that does not fit is reported with the
compiler's figure. A phase whose resident arrays alone (weights, optimizer state, KV cache:
`estimate_peak_bytes`, a lower bound) exceed the budget is not compiled and is reported with
that arithmetic. The rollout is tried at the whole step's rows, then in halves
(`config.rollout.decode_batch`) until a chunk fits. Fitting plans are ranked by predicted seconds per RL step:
each phase's roofline (`jaxrl_llm.scale.costs`, collectives from the compiled HLO) combined by
the pipeline model (`jaxrl_llm.runners.pipeline_model`) with the compiled phase times in place of
its scaling guesses.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from typing import NamedTuple

from jax.sharding import Mesh

from jaxrl_llm.models import partitioning
from jaxrl_llm.runners.pipeline_model import simulate_async_groups
from jaxrl_llm.scale import costs, programs
from jaxrl_llm.scale.analysis import CompileCache, ProgramReport, analyze
from jaxrl_llm.scale.chips import Chip
from jaxrl_llm.scale.executables import save_executable
from jaxrl_llm.scale.topology import Topology
from jaxrl_llm.scale.workload import Workload
from jaxrl_llm.sharding import make_mesh
from kernels.logprobs import default_implementation

MESH_AXES = ("data", "model")


def refusal(error: Exception, chip: Chip) -> str:
    """Why the compiler refused a program, in a line (the known cases explained)."""
    text = str(error)
    if "limited ICI routing" in text:
        return (
            f"the compiler refused it: on {chip.name} (limited ICI routing) XLA:TPU compiles a "
            "program only over every chip of the slice, so a split placement needs one slice "
            "per group (multi-slice, over DCN), which this planner does not model; use a "
            "colocated placement"
        )
    return f"the compiler refused it: {text:.200}"


class Candidate(NamedTuple):
    """A placement to evaluate.

    Attributes:
      mode: "colocated" or "split".
      train_mesh: (data, model) of the learner's mesh.
      rollout_mesh: (data, model) of the rollout's mesh.
      train_devices: (first device index, count) of the learner's devices in the topology.
      rollout_devices: (first, count) of the rollout's.
    """

    mode: str
    train_mesh: tuple[int, int]
    rollout_mesh: tuple[int, int]
    train_devices: tuple[int, int]
    rollout_devices: tuple[int, int]
    decode_batch: int = 0

    def label(self) -> str:
        """ "colocated 64x4 / 32x8" or "split 128/256: 32x4 | 16x8", with " (decode 256 rows)"
        when the rollout decodes in chunks."""
        t = "x".join(map(str, self.train_mesh))
        r = "x".join(map(str, self.rollout_mesh))
        chunks = f" (decode {self.decode_batch} rows)" if self.decode_batch else ""
        if self.mode == "colocated":
            return f"colocated {t} / {r}{chunks}"
        total = self.train_devices[1] + self.rollout_devices[1]
        return f"split {self.rollout_devices[1]}/{total}: {t} | {r}{chunks}"


class PhaseResult(NamedTuple):
    """One phase of a plan.

    Attributes:
      phase: the phase name.
      report: the compiler's report (None when not compiled).
      peak_bytes: the phase's compiled peak plus what other roles keep on its chips then.
      seconds: predicted seconds per RL step (all its runs).
      roofline: the roofline of one run.
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

    def overrides(self) -> list[str]:
        """Command-line overrides that select this plan (placement, and the decode chunk)."""
        out = [f"--config.placement.{k}={v!r}".replace(" ", "") for k, v in self.placement.items()]
        return out + [f"--config.rollout.decode_batch={self.candidate.decode_batch}"]


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


def decode_batches(workload: Workload, data: int) -> list[int]:
    """Rows per decode program to try, largest first: every row of the step, then halves, while
    each chunk keeps at least one row per "data" shard and whole groups (0 means all)."""
    out, rows = [0], workload.sequences // 2
    while rows >= max(data, workload.group_size, 1) and workload.sequences % rows == 0:
        out.append(rows)
        rows //= 2
    return out


class Searcher:
    """Evaluates candidates of one workload on one topology, compiling each (phase, mesh) once.

    Args:
      workload: the RL step.
      topology: the TPU slice (or any device list with a `Chip`, e.g. this machine's CPUs).
      cache: the compile cache (None: compile every time).
      reserve: the fraction of HBM left free for the runtime (default 5%).
      prescreen: skip compiling a phase whose lower-bound estimate exceeds this many budgets.
      log: where progress lines go (one per compile).
    """

    def __init__(
        self,
        workload: Workload,
        topology: Topology,
        *,
        cache: CompileCache | None = None,
        reserve: float = 0.05,
        prescreen: float = 1.0,
        log: Callable[[str], None] = print,
    ):
        self.workload, self.topology, self.cache = workload, topology, cache
        self.chip: Chip = topology.chip
        self.budget = self.chip.hbm_bytes * (1 - reserve)
        self.prescreen, self.log = prescreen, log
        self._reports: dict[tuple, ProgramReport | Exception] = {}

    def mesh(self, shape: tuple[int, int], devices: tuple[int, int]) -> Mesh:
        """The mesh of `shape` over the topology's devices[start : start + count].

        Raises:
          ValueError: the mesh needs more chips than the topology has.
        """
        start, count = devices
        if start + count > self.topology.num_chips or math.prod(shape) != count:
            raise ValueError(
                f"a {self._shape(shape)} mesh on chips {start}..{start + count - 1} does not fit "
                f"{self.topology.name} ({self.topology.num_chips} chips): choose meshes whose "
                f"sizes multiply to at most {self.topology.num_chips}."
            )
        return make_mesh(shape, MESH_AXES, devices=self.topology.devices[start : start + count])

    def report(self, phase: str, shape, devices, rows: int = 0) -> ProgramReport | Exception:
        """The compiled report of a phase on a mesh (cached in memory and on disk; `rows` is
        the rollout's decode chunk, 0 for all); the exception when the compiler refused it
        for another reason than memory."""
        key = (phase, shape, devices) + ((rows,) if rows else ())
        if key in self._reports:
            return self._reports[key]
        try:
            built = self.programs(phase, shape, devices, rows)
            reports = [analyze(program, self.cache) for program in built]
        except Exception as error:  # noqa: BLE001 - recorded against the plan, with its text
            self.log(f"  {phase} on {shape}: the compiler refused it: {error!s:.300}")
            self._reports[key] = error
            return error
        for program, report in zip(built, reports, strict=True):
            suffix = (rows,) if rows and program.phase == "rollout" else ()
            self._reports[(program.phase, shape, devices) + suffix] = report
            self._reports[(program.phase, shape, devices, "state")] = program.state_bytes
            seconds = f"{report.compile_seconds:.0f} s" if report.compile_seconds else "cached"
            chunk = f", {rows} rows" if rows and program.phase == "rollout" else ""
            verdict = (
                "out of memory: " + report.out_of_memory
                if report.out_of_memory
                else (f"peak {report.peak_bytes / 2**30:6.2f} GiB")
            )
            self.log(
                f"  {program.phase:13s} {'x'.join(map(str, shape)):>7s} on {devices[1]} chips"
                f"{chunk}: {verdict} ({seconds})"
            )
        return self._reports[key]

    def programs(self, phase: str, shape, devices, rows: int = 0) -> list[programs.Program]:
        """The lowered programs of a phase on a mesh ("critic": its value forward and train
        step); `rows` is the rollout's decode chunk, 0 for all."""
        mesh = self.mesh(shape, devices)
        builders = {
            "actor_train": lambda: [programs.actor_train_program(self.workload, mesh)],
            "rollout": lambda: [programs.rollout_program(self.workload, mesh, rows=rows or None)],
            "reference": lambda: [programs.reference_program(self.workload, mesh)],
            "reward_model": lambda: [programs.reward_model_program(self.workload, mesh)],
            "critic": lambda: programs.critic_programs(self.workload, mesh),
        }
        return builders[phase]()

    def save_executables(self, plan: Plan, directory: str) -> list[str]:
        """Compiles every phase of `plan` once more and saves each executable under
        `directory`/<phase> (`jaxrl_llm.scale.executables`), so a run on the slice loads what
        was planned; returns the phases saved."""
        c = plan.candidate
        train = (c.train_mesh, c.train_devices)
        names = ["critic" if p.startswith("critic") else p for p in self._phases_of()]
        saved = []
        for name in dict.fromkeys(names):  # critic once: both its programs
            where = (
                (c.rollout_mesh, c.rollout_devices, c.decode_batch) if name == "rollout" else train
            )
            for program in self.programs(name, *where):
                save_executable(
                    program.lowered.compile(),
                    os.path.join(directory, program.phase),
                    topology=self.topology.name,
                    phase=program.phase,
                )
                saved.append(program.phase)
        return saved

    def state_bytes(self, phase: str, shape, devices) -> float:
        """Per-device bytes the phase's role keeps between phases."""
        return float(self._reports.get((phase, shape, devices, "state"), 0.0))

    def _phases_of(self) -> list[str]:
        roles = self.workload.roles
        phases = ["actor_train", "rollout"]
        if "reference" in roles:
            phases.append("reference")
        if "critic" in roles:
            phases += ["critic_values", "critic_train"]
        if "reward_model" in roles:
            phases.append("reward_model")
        return phases

    def _reject(self, candidate: Candidate, reason: str) -> Plan:
        return Plan(candidate, {}, False, reason, math.inf, math.nan)

    def evaluate(self, candidate: Candidate) -> Plan:
        """Compiles (or reads) every phase of `candidate`, the rollout at the largest decode
        chunk that fits (halving from the whole step), and predicts its step time."""
        w = self.workload
        train = (candidate.train_mesh, candidate.train_devices)
        roll = (candidate.rollout_mesh, candidate.rollout_devices)
        estimate = estimate_peak_bytes(w, "actor_train", candidate.train_mesh)
        if estimate > self.prescreen * self.budget:
            return self._reject(candidate, self._estimate_reason("actor_train", train[0], estimate))
        reports: dict[str, tuple[ProgramReport, tuple]] = {}
        for phase in self._phases_of():
            if phase == "rollout":
                continue
            name = "critic" if phase.startswith("critic") else phase
            result = self.report(name, *train)
            if phase.startswith("critic"):
                result = self._reports.get((phase, *train), result)
            if isinstance(result, Exception):
                return self._reject(candidate, f"{phase}: {refusal(result, self.chip)}")
            if result.out_of_memory:
                return self._reject(candidate, f"{phase} on {self._shape(train[0])}: compiler: "
                                               f"{result.out_of_memory}")  # fmt: skip
            reports[phase] = (result, train)
        learner_state = {
            p: self.state_bytes(p, *placement) for p, (_, placement) in reports.items()
        }
        rollout, rows, why = self._fitting_rollout(candidate, learner_state)
        if rollout is None:
            return self._reject(candidate, why)
        candidate = candidate._replace(decode_batch=rows)
        reports["rollout"] = (rollout, roll)
        phases = self._predict(candidate, reports)
        over = [p for p in phases.values() if p.peak_bytes > self.budget]
        if over:
            worst = max(over, key=lambda p: p.peak_bytes)
            compiled = worst.report.peak_bytes if worst.report else 0.0
            reason = (
                f"{worst.phase} needs {worst.peak_bytes / 2**30:.2f} GiB per chip (compiled peak "
                f"{compiled / 2**30:.2f} GiB + resident roles) > {self.budget / 2**30:.2f} GiB "
                f"({self.chip.name} HBM {self.chip.hbm_bytes / 2**30:.0f} GiB less the reserve)"
            )
            return Plan(candidate, phases, False, reason, math.inf, math.nan)
        step = self._step_seconds(candidate, phases)
        floor = costs.roofline(self._decode(candidate).step_floor, self.chip)
        return Plan(candidate, phases, True, "", step, floor.seconds * 1e3)

    @staticmethod
    def _shape(shape) -> str:
        return "x".join(map(str, shape))

    def _estimate_reason(self, phase: str, shape, estimate: float, rows: int = 0) -> str:
        chunk = f" at {rows} rows per decode" if rows else ""
        return (
            f"{phase} on {self._shape(shape)}{chunk}: its weights, optimizer state and KV cache "
            f"alone take {estimate / 2**30:.1f} GiB per chip > the {self.budget / 2**30:.1f} GiB "
            "budget (not compiled)"
        )

    def _fitting_rollout(self, candidate: Candidate, learner_state: dict[str, float]):
        """(report, rows, "") of the largest decode chunk whose compiled peak, with the
        learner's state resident beside it when colocated, fits; (None, 0, why) otherwise."""
        w = self.workload
        shape, devices = candidate.rollout_mesh, candidate.rollout_devices
        resident = 0.0 if candidate.mode == "split" else sum(learner_state.values())
        why = ""
        for rows in decode_batches(w, shape[0]):
            estimate = estimate_peak_bytes(w, "rollout", shape, rows)
            if estimate + resident > self.prescreen * self.budget:
                why = self._estimate_reason("rollout", shape, estimate + resident, rows)
                continue
            result = self.report("rollout", shape, devices, rows)
            chunk = f"{rows} rows" if rows else f"all {w.sequences} rows"
            if isinstance(result, Exception):
                return None, 0, f"rollout: {refusal(result, self.chip)}"
            if result.out_of_memory:
                why = f"rollout on {self._shape(shape)} ({chunk}): compiler: {result.out_of_memory}"
                continue
            if result.peak_bytes + resident > self.budget:
                why = (
                    f"rollout on {self._shape(shape)} ({chunk}) needs "
                    f"{(result.peak_bytes + resident) / 2**30:.2f} GiB per chip (compiled peak "
                    f"{result.peak_bytes / 2**30:.2f} GiB + {resident / 2**30:.2f} GiB of the "
                    f"learner's state) > {self.budget / 2**30:.2f} GiB"
                )
                continue
            return result, rows, ""
        return None, 0, why or "no decode chunk to try"

    def _decode(self, candidate: Candidate) -> costs.DecodeCost:
        """One decode chunk's cost (`candidate.decode_batch` rows, or all)."""
        w = self.workload
        d, m = candidate.rollout_mesh
        rows = candidate.decode_batch or w.sequences
        split = costs.split_of(w.model, rows, d, m, fsdp=False)
        shared = w.config.rollout.prefix_sharing != "none"
        unique = max(rows // w.group_size, 1) if shared else rows
        return costs.decode_cost(w.model, rows, unique, w.prompt_len, w.response_len, split)

    def _predict(self, candidate: Candidate, reports) -> dict[str, PhaseResult]:
        w, chip = self.workload, self.chip
        td, tm = candidate.train_mesh
        train_split = costs.split_of(w.model, w.minibatch_rows, td, tm, fsdp=True)
        full_split = costs.split_of(w.model, w.sequences, td, tm, fsdp=True)
        state = {p: self.state_bytes(p, *placement) for p, (_, placement) in reports.items()}
        out: dict[str, PhaseResult] = {}
        for phase, (report, _) in reports.items():
            comm = report.comm_seconds(chip)
            if phase == "rollout":
                decode = self._decode(candidate)
                prefill = costs.roofline(decode.prefill._replace(comm_seconds=comm), chip)
                per_step = decode.decode.scaled(1 / decode.decode.steps)._replace(
                    comm_seconds=report.comm_seconds(chip, per_iteration=True)
                )
                step_line = costs.roofline(per_step, chip)
                chunk = prefill.seconds + step_line.seconds * decode.decode.steps
                seconds = chunk * report.runs
                line = step_line
            elif phase in ("actor_train", "critic_train"):
                cost = costs.train_step_cost(
                    w.model, w.minibatch_rows, w.length, train_split, remat=w.config.train.remat,
                    lora=w.lora and phase == "actor_train",
                    logprob_implementation=self.logprob_implementation(),
                    attention_kernel=self.attention_kernel(),
                    scalar_head=phase == "critic_train",
                )._replace(comm_seconds=comm)  # fmt: skip
                line = costs.roofline(cost, chip)
                seconds = line.seconds * report.runs
            else:
                cost = costs.forward_cost(
                    w.model, w.sequences, w.length, full_split,
                    attention_kernel=self.attention_kernel(),
                    scalar_head=phase in ("critic_values", "reward_model"),
                )  # fmt: skip
                line = costs.roofline(cost._replace(comm_seconds=comm), chip)
                seconds = line.seconds
            resident = self._resident(candidate, phase, state)
            out[phase] = PhaseResult(phase, report, report.peak_bytes + resident, seconds, line)
        out["reshard"] = self._reshard(candidate, state)
        return out

    def attention_kernel(self) -> bool:
        """Whether the train step and the forwards run the splash attention kernel, as the
        programs do on TPU layouts (`models.partitioning`) at lengths it tiles."""
        from kernels.attention import supported

        return (
            self._platform() == "tpu"
            and partitioning.layout_kernels_enabled()
            and supported(self.workload.length)
        )

    def _platform(self) -> str:
        """The platform of the topology's devices ("tpu"; "cpu" for this machine's)."""
        return self.topology.devices[0].platform

    def logprob_implementation(self) -> str:
        """The log-prob backend the train step runs with on this chip."""
        configured = self.workload.config.loss.get("logprob_implementation", None)
        if configured:
            return configured
        if not partitioning.layout_kernels_enabled():
            return "xla"
        return default_implementation(self._platform())  # as `training.logprobs` picks it

    def _resident(self, candidate: Candidate, phase: str, state: dict[str, float]) -> float:
        """Bytes other roles keep on the chips of `phase` while it runs."""
        learner = ["actor_train", "reference", "critic_train", "reward_model"]
        if candidate.mode == "split" and phase == "rollout":
            return 0.0
        others = [p for p in learner if p in state and p != phase]
        if phase == "critic_values":
            others = [p for p in others if p != "critic_train"]
        return sum(state[p] for p in others)

    def _reshard(self, candidate: Candidate, state: dict[str, float]) -> PhaseResult:
        """The weight sync: the decode copy's bytes gathered over the train mesh's FSDP axis
        (colocated) or copied across groups (split), at one torus dimension's ICI bandwidth."""
        decode_bytes = state.get("rollout", 0.0)
        if candidate.mode == "colocated":
            d = candidate.train_mesh[0]
            moved = decode_bytes * (1 - 1 / d)
        else:
            moved = decode_bytes
        bandwidth = self.chip.collective_bandwidth(1) or self.chip.hbm_bandwidth
        seconds = moved / bandwidth
        peak = decode_bytes + state.get("actor_train", 0.0)
        if candidate.mode == "colocated":
            peak += sum(v for k, v in state.items() if k in ("reference", "critic_train"))
        line = costs.Roofline(seconds, 0.0, 0.0, seconds, 0.0, "comm")
        return PhaseResult("reshard", None, peak, seconds, line)

    def _step_seconds(self, candidate: Candidate, phases: dict[str, PhaseResult]) -> float:
        """Seconds per RL step: phases in sequence, or the pipeline model's asynchronous
        steady state for a split, asynchronous run."""
        generate = phases["rollout"].seconds
        learn = sum(p.seconds for name, p in phases.items() if name not in ("rollout", "reshard"))
        sync = phases["reshard"].seconds
        if candidate.mode == "split" and self.workload.asynchronous:
            c = self.workload.config.async_rl
            steps = 16
            timeline = simulate_async_groups(
                [generate] * steps, [learn] * steps, sync,
                max_staleness=c.max_staleness, sync_every=c.sync_every,
            )  # fmt: skip
            return timeline.total_s / steps
        return generate + learn + sync

    def search(self, cands: Sequence[Candidate]) -> list[Plan]:
        """Evaluates `cands`; fitting plans first, fastest first, then the rest."""
        plans = []
        for i, candidate in enumerate(cands):
            self.log(f"[{i + 1}/{len(cands)}] {candidate.label()}")
            plans.append(self.evaluate(candidate))
        return sorted(plans, key=lambda p: (not p.fits, p.step_seconds))
