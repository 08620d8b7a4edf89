"""The placement search: meshes per phase, checked by the compiler, ranked by predicted step time.

    plans = Searcher(workload, get_topology("v5e-256"), cache=CompileCache(...)).search(cands)
    best = next(p for p in plans if p.fits)
    best.placement   # {"mode": "colocated", "train_mesh": (64, 4), "rollout_mesh": (32, 8)}

The candidates (colocated or split placements) and the plans are `jaxrl_llm.scale.placements`.
Each distinct (phase, mesh, chunk) is compiled once (`analysis.analyze`, cached), the weight
sync as the programs a run executes (`jaxrl_llm.scale.weight_sync`, its phases per chip group
from `jaxrl_llm.scale.sync_phases`). A plan fits when every
phase's compiled peak, plus what the other roles keep resident on the same chips at that time,
is within the chip's HBM less `reserve`, on each chip group; a plan that does not fit is
reported with the compiler's figure. A phase whose resident arrays alone (weights, optimizer
state, KV cache: `estimate_peak_bytes`, a lower bound) exceed the budget is not compiled and is
reported with that arithmetic. The rollout is tried at the whole step's rows, then in halves
(`config.rollout.decode_batch`) until a chunk fits; the frozen forwards (reference, critic
values, reward model) the same way (`config.rollout.forward_batch`, one chunk for all of them).
Fitting plans are ranked by predicted seconds per RL step: each phase's roofline
(`jaxrl_llm.scale.costs`, collectives from the compiled HLO) combined by the pipeline model
(`jaxrl_llm.runners.pipeline_model`) with the compiled phase times in place of its scaling
guesses.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from jax.sharding import Mesh

from jaxrl_llm.models import partitioning
from jaxrl_llm.rollout import CacheLayout
from jaxrl_llm.rollout.engine import decode_options
from jaxrl_llm.runners.pipeline_model import simulate_async_groups
from jaxrl_llm.scale import costs, programs, weight_sync
from jaxrl_llm.scale.analysis import CompileCache, ProgramReport, analyze
from jaxrl_llm.scale.chips import Chip
from jaxrl_llm.scale.placements import (
    FORWARD_PHASES,
    SYNC_PHASES,
    Candidate,
    PhaseResult,
    Plan,
    decode_batches,
    estimate_peak_bytes,
    forward_batches,
)
from jaxrl_llm.scale.saved_plan import save_plan_executables
from jaxrl_llm.scale.sync_phases import sync_phases
from jaxrl_llm.scale.topology import Topology
from jaxrl_llm.scale.workload import Workload
from jaxrl_llm.sharding import DECODE_RULES, make_mesh
from kernels.logprobs import default_implementation

MESH_AXES = ("data", "model")
# The phases that run on the learner's chips, each keeping its role's state there.
LEARNER_PHASES = ("actor_train", "reference", "critic_train", "reward_model")


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
        the chunk of the rollout or a frozen forward, 0 for all); the exception when the
        compiler refused it for another reason than memory."""
        key = (phase, shape, devices) + ((rows,) if rows else ())
        if key in self._reports:
            return self._reports[key]
        try:
            [program] = self.programs(phase, shape, devices, rows)
            report = analyze(program, self.cache)
        except Exception as error:  # noqa: BLE001 - recorded against the plan, with its text
            self.log(f"  {phase} on {shape}: the compiler refused it: {error!s:.300}")
            self._reports[key] = error
            return error
        self._reports[key] = report
        self._reports[(phase, shape, devices, "state")] = program.state_bytes
        seconds = f"{report.compile_seconds:.0f} s" if report.compile_seconds else "cached"
        verdict = (
            "out of memory: " + report.out_of_memory
            if report.out_of_memory
            else f"peak {report.peak_bytes / 2**30:6.2f} GiB"
        )
        self.log(
            f"  {phase:13s} {self._shape(shape):>7s} on {devices[1]} chips"
            f"{f', {rows} rows' if rows else ''}: {verdict} ({seconds})"
        )
        return report

    def programs(self, phase: str, shape, devices, rows: int = 0) -> list[programs.Program]:
        """The lowered program of a phase on a mesh, in a list; `rows` is the chunk of the
        rollout or a frozen forward, 0 for all."""
        mesh, w, rows = self.mesh(shape, devices), self.workload, rows or None
        builders = {
            "actor_train": lambda: programs.actor_train_program(w, mesh),
            "rollout": lambda: programs.rollout_program(w, mesh, rows=rows),
            "reference": lambda: programs.reference_program(w, mesh, rows=rows),
            "reward_model": lambda: programs.reward_model_program(w, mesh, rows=rows),
            "critic_values": lambda: programs.critic_values_program(w, mesh, rows=rows),
            "critic_train": lambda: programs.critic_train_program(w, mesh),
        }
        return [builders[phase]()]

    def save_executables(self, plan: Plan, directory: str) -> tuple[list[str], int]:
        """Saves every program of `plan` under `directory` for a run on the slice to load
        (`jaxrl_llm.scale.saved_plan`). Returns (the phases saved, the weight-sync programs
        saved)."""
        return save_plan_executables(self, plan, directory)

    def state_bytes(self, phase: str, shape, devices) -> float:
        """Per-device bytes the phase's role keeps between phases."""
        return float(self._reports.get((phase, shape, devices, "state"), 0.0))

    def phases(self) -> list[str]:
        """The phases a step of this workload runs (its roles decide the frozen forwards)."""
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
        """Compiles (or reads) every phase of `candidate`: the train steps, the frozen forwards
        and the rollout each at the largest chunk that fits (halving from the whole step), the
        weight sync; and predicts its step time."""
        train = (candidate.train_mesh, candidate.train_devices)
        estimate = estimate_peak_bytes(self.workload, "actor_train", candidate.train_mesh)
        if estimate > self.prescreen * self.budget:
            return self._reject(candidate, self._estimate_reason("actor_train", train[0], estimate))
        reports: dict[str, ProgramReport] = {}
        for phase in ("actor_train", "critic_train"):
            if phase not in self.phases():
                continue
            result = self.report(phase, *train)
            why = self._refused(phase, train[0], result)
            if why:
                return self._reject(candidate, why)
            reports[phase] = result
        forwards, rows, why = self._fitting_forwards(candidate)
        if forwards is None:
            return self._reject(candidate, why)
        reports.update(forwards)
        candidate = candidate._replace(forward_batch=rows)
        learner_state = {p: self.state_bytes(p, *train) for p in reports}
        rollout, rows, why = self._fitting_rollout(candidate, learner_state)
        if rollout is None:
            return self._reject(candidate, why)
        candidate = candidate._replace(decode_batch=rows)
        reports["rollout"] = rollout
        phases = self._predict(candidate, reports)
        sync = self._sync(candidate)
        if isinstance(sync, str):
            return self._reject(candidate, sync)
        phases.update(sync)
        over = [p for p in phases.values() if p.peak_bytes > self.budget]
        if over:
            worst = max(over, key=lambda p: p.peak_bytes)
            what = "the arrays the sync keeps and moves"
            if worst.phase not in SYNC_PHASES:
                what = f"compiled peak {worst.report.peak_bytes / 2**30:.2f} GiB"
            reason = (
                f"{worst.phase} needs {worst.peak_bytes / 2**30:.2f} GiB per chip ({what} + "
                f"resident roles) > {self.budget / 2**30:.2f} GiB "
                f"({self.chip.name} HBM {self.chip.hbm_bytes / 2**30:.0f} GiB less the reserve)"
            )
            return Plan(candidate, phases, False, reason, math.inf, math.nan)
        step = self._step_seconds(candidate, phases)
        floor = costs.roofline(self._decode(candidate).step_floor, self.chip)
        return Plan(candidate, phases, True, "", step, floor.seconds * 1e3)

    @staticmethod
    def _shape(shape) -> str:
        return "x".join(map(str, shape))

    def _refused(self, phase: str, shape, result, rows: int = 0) -> str:
        """Why the compiler refused `result` (an exception or an out-of-memory report), or ""."""
        if isinstance(result, Exception):
            return f"{phase}: {refusal(result, self.chip)}"
        if result.out_of_memory:
            chunk = f" ({rows} rows)" if rows else ""
            return f"{phase} on {self._shape(shape)}{chunk}: compiler: {result.out_of_memory}"
        return ""

    def _estimate_reason(self, phase: str, shape, estimate: float, rows: int = 0) -> str:
        chunk = f" at {rows} rows per decode" if rows else ""
        return (
            f"{phase} on {self._shape(shape)}{chunk}: its weights, optimizer state and KV cache "
            f"alone take {estimate / 2**30:.1f} GiB per chip > the {self.budget / 2**30:.1f} GiB "
            "budget (not compiled)"
        )

    def _fitting_forwards(self, candidate: Candidate):
        """({phase: report}, rows, "") of the frozen forwards at the largest chunk where each
        one's compiled peak, with the learner's other states resident beside it, fits; ({}, 0,
        "") without forwards; (None, 0, why) when no chunk fits."""
        phases = [p for p in self.phases() if p in FORWARD_PHASES]
        if not phases:
            return {}, 0, ""
        train = (candidate.train_mesh, candidate.train_devices)
        why = ""
        for rows in forward_batches(self.workload, candidate.train_mesh[0]):
            results = {p: self.report(p, *train, rows) for p in phases}
            refused = [self._refused(p, train[0], r, rows) for p, r in results.items()]
            if any(isinstance(r, Exception) for r in results.values()):
                return None, 0, next(r for r in refused if r)
            why = next((r for r in refused if r), "")
            if why:
                continue
            state = {p: self.state_bytes(p, *train) for p in self.phases()
                     if p in LEARNER_PHASES}  # fmt: skip
            for phase, report in results.items():
                need = report.peak_bytes + self._resident(candidate, phase, state)
                if need > self.budget:
                    why = (
                        f"{phase} on {self._shape(train[0])} ({rows or 'all'} rows) needs "
                        f"{need / 2**30:.2f} GiB per chip (compiled peak "
                        f"{report.peak_bytes / 2**30:.2f} GiB + resident roles) > "
                        f"{self.budget / 2**30:.2f} GiB"
                    )
                    break
            else:
                return results, rows, ""
        return None, 0, why or "no forward chunk to try"

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

    def _sync(self, candidate: Candidate) -> dict[str, PhaseResult] | str:
        """The weight sync's phases (`scale.sync_phases`), its programs compiled once per pair
        of meshes; or why the compiler refused one."""
        train = (candidate.train_mesh, candidate.train_devices)
        roll = (candidate.rollout_mesh, candidate.rollout_devices)
        key = ("weight sync", train, roll)
        if key not in self._reports:
            try:
                sync = weight_sync.reshard_programs(
                    self.workload, self.mesh(*train), self.mesh(*roll)
                )
                reports = [analyze(p, self.cache) for p in sync.programs]
            except Exception as error:  # noqa: BLE001 - recorded against the plan
                self._reports[key] = error
            else:
                self._reports[key] = (sync, reports)
                seconds = sum(r.compile_seconds for r in reports)
                self.log(
                    f"  weight sync   {self._shape(train[0])} -> {self._shape(roll[0])}: "
                    f"{len(reports)} programs run {sum(p.runs for p in sync.programs)} times "
                    f"({f'{seconds:.0f} s' if seconds else 'cached'})"
                )
        result = self._reports[key]
        if isinstance(result, Exception):
            return f"reshard: {refusal(result, self.chip)}"
        sync, reports = result
        refused = [self._refused(r.phase, train[0], r) for r in reports]
        if any(refused):
            return next(r for r in refused if r)
        state = {p: self.state_bytes(p, *train) for p in self.phases() if p in LEARNER_PHASES}
        return sync_phases(
            sync, reports, self.chip, split=candidate.mode == "split",
            learner_resident=sum(state.values()),
        )  # fmt: skip

    def _decode(self, candidate: Candidate) -> costs.DecodeCost:
        """One decode chunk's cost (`candidate.decode_batch` rows, or all), with the decode
        attention and compaction stages the rollout program runs
        (`rollout.engine.decode_options`)."""
        w = self.workload
        d, m = candidate.rollout_mesh
        rows = candidate.decode_batch or w.sequences
        split = costs.split_of(w.model, rows, d, m, fsdp=False)
        shared = w.config.rollout.prefix_sharing != "none"
        unique = max(rows // w.group_size, 1) if shared else rows
        mesh = self.mesh(candidate.rollout_mesh, candidate.rollout_devices)
        static = decode_options(
            programs.rollout_generation_config(w), w.model, CacheLayout(mesh, DECODE_RULES),
            rows, copies_rows=False,
        )  # fmt: skip
        return costs.decode_cost(
            w.model, rows, unique, w.prompt_len, w.response_len, split,
            attention_kernel=static.attention != "xla", stages=static.stages,
        )  # fmt: skip

    def _predict(self, candidate: Candidate, reports) -> dict[str, PhaseResult]:
        w, chip = self.workload, self.chip
        td, tm = candidate.train_mesh
        train = (candidate.train_mesh, candidate.train_devices)
        train_split = costs.split_of(w.model, w.minibatch_rows, td, tm, fsdp=True)
        chunk = candidate.forward_batch or w.sequences
        chunk_split = costs.split_of(w.model, chunk, td, tm, fsdp=True)
        state = {p: self.state_bytes(p, *train) for p in reports if p in LEARNER_PHASES}
        out: dict[str, PhaseResult] = {}
        for phase, report in reports.items():
            comm = report.comm_seconds(chip)
            if phase == "rollout":
                decode = self._decode(candidate)
                prefill = costs.roofline(decode.prefill._replace(comm_seconds=comm), chip)
                per_step = decode.decode.scaled(1 / decode.decode.steps)._replace(
                    comm_seconds=report.comm_seconds(chip, per_iteration=True)
                )
                line = costs.roofline(per_step, chip)
                seconds = (prefill.seconds + line.seconds * decode.decode.steps) * report.runs
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
            else:  # a frozen forward over one chunk of rows
                cost = costs.forward_cost(
                    w.model, chunk, w.length, chunk_split,
                    attention_kernel=self.attention_kernel(),
                    scalar_head=phase in ("critic_values", "reward_model"),
                )  # fmt: skip
                line = costs.roofline(cost._replace(comm_seconds=comm), chip)
                seconds = line.seconds * report.runs
            resident = self._resident(candidate, phase, state)
            out[phase] = PhaseResult(phase, report, report.peak_bytes + resident, seconds, line)
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
        """Bytes other roles keep on the chips of `phase` while it runs: the learner's roles'
        states (the chips of a split rollout hold none of them)."""
        if candidate.mode == "split" and phase == "rollout":
            return 0.0
        others = [p for p in LEARNER_PHASES if p in state and p != phase]
        if phase == "critic_values":  # the critic's weights are in its train state
            others = [p for p in others if p != "critic_train"]
        return sum(state[p] for p in others)

    def _step_seconds(self, candidate: Candidate, phases: dict[str, PhaseResult]) -> float:
        """Seconds per RL step: phases in sequence, or the pipeline model's asynchronous
        steady state for a split, asynchronous run."""
        generate = phases["rollout"].seconds
        sync = sum(p.seconds for name, p in phases.items() if name in SYNC_PHASES)
        learn = sum(
            p.seconds for name, p in phases.items() if name != "rollout" and name not in SYNC_PHASES
        )
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
