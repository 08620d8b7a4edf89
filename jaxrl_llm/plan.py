"""Command line: check that an RL run fits a TPU pod, and pick its meshes, before renting it.

    python -m jaxrl_llm.plan --config experiments/configs/grpo_llama8b_pod.py --topology v5e-256
    python -m jaxrl_llm.plan --config CONFIG.py --topology v5p-128 --config.rollout.group_size=8

Compiles every phase of the config's RL step (the actor's train step, the decode program, the
reference / critic / reward-model forwards, the weight sync; `jaxrl_llm.scale.programs`,
`jaxrl_llm.scale.weight_sync`) for the topology's chips on this CPU through libtpu (the
optional `tpu` extra; no TPU needed), for each candidate placement (`jaxrl_llm.scale.planner`),
rejects what does not fit in HBM with the compiler's figure, ranks the rest by predicted step
time, and prints the best plans. The chosen plan's `config.placement` goes to
`--out/placement.json`, with the row chunks (decode, frozen forwards) as dotted overrides
(`apply_overrides`) in `--out/overrides.json` and as flags on stdout; the tables to
`--out/plan.md`. Compiled reports are cached in `--cache_dir`, so a rerun takes seconds.

This entry point only parses flags and calls `jaxrl_llm.scale`; see docs/scale.md.
"""

from __future__ import annotations

import json
import os
import sys
import time

from absl import app, flags

_CONFIG = flags.DEFINE_string("config", None, "A run config file with get_config().")
_TOPOLOGY = flags.DEFINE_string("topology", None, "v5e-16/64/256, v5p-128/512/1024, ...")
_TOP = flags.DEFINE_integer("top", 5, "Plans to print.")
_MODES = flags.DEFINE_list("modes", ["colocated", "split"], "Placements to search.")
_TP = flags.DEFINE_list(
    "tensor_parallel", ["1", "2", "4", "8", "16"], "Model-axis sizes of the learner to try."
)
_DECODE_TP = flags.DEFINE_list(
    "decode_tensor_parallel", None, "Model-axis sizes of the rollout (default --tensor_parallel)."
)
_FRACTIONS = flags.DEFINE_list(
    "split_fractions", ["0.5"], "Generator shares of the chips in split placements."
)
_RESERVE = flags.DEFINE_float("reserve", 0.05, "Fraction of HBM left to the runtime.")
_HBM_GIB = flags.DEFINE_float("hbm_gib", 0.0, "Override the chip's HBM (GiB), e.g. a margin.")
_CACHE_DIR = flags.DEFINE_string(
    "cache_dir",
    os.path.join(os.path.expanduser("~"), ".cache", "jaxrl_llm", "aot"),
    "Where compiled reports are cached; empty to disable.",
)
_OUT = flags.DEFINE_string("out", None, "Directory for plan.md, plans.json, placement.json.")
_IMPORTS = flags.DEFINE_multi_string(
    "import", [], "A module or .py file registering what the config names, imported first."
)
_SAVE_EXECUTABLES = flags.DEFINE_bool(
    "save_executables",
    False,
    "Also compile the chosen plan's phases once more and save the executables under "
    "--out/executables (jaxrl_llm.sharding.executables), for a run on the slice to load.",
)
_PLACEMENT = flags.DEFINE_string(
    "placement",
    None,
    "Evaluate one placement instead of searching: 'colocated' or 'split', with --train_mesh "
    "and --rollout_mesh (data,model); split puts the rollout on the chips after the learner's.",
)
_TRAIN_MESH = flags.DEFINE_list("train_mesh", None, "data,model of the learner's mesh.")
_ROLLOUT_MESH = flags.DEFINE_list("rollout_mesh", None, "data,model of the rollout's mesh.")


def _overrides(argv: list[str]) -> dict[str, object]:
    """`--config.a.b=value` pairs of argv (values parsed as Python literals when they are)."""
    import ast

    out = {}
    for arg in argv[1:]:
        if not arg.startswith("--config."):
            raise app.UsageError(f"Unknown argument {arg!r}; config fields go as --config.a.b=v.")
        key, _, value = arg[len("--config.") :].partition("=")
        try:
            out[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            out[key] = value
    return out


def main(argv):
    """absl's entry point: plans the config on the topology the flags name (module docstring)."""
    if _CONFIG.value is None or _TOPOLOGY.value is None:
        raise app.UsageError("--config and --topology are required.")
    if _SAVE_EXECUTABLES.value and not _OUT.value:
        raise app.UsageError("--save_executables writes under --out: give --out DIR.")
    import jax

    if not jax.config.jax_platforms:  # compile for TPU on this CPU; never take a TPU's chips
        jax.config.update("jax_platforms", "cpu")
    from jaxrl_llm.scale import (
        CompileCache,
        Searcher,
        candidates,
        divisibility_notes,
        figures_note,
        get_topology,
        libtpu_status,
        phases_table,
        plans_table,
        workload_of,
    )
    from jaxrl_llm.stages import load_config

    try:
        topology = get_topology(_TOPOLOGY.value)
        config = load_config(_CONFIG.value, _overrides(argv))
        workload = workload_of(config)
    except (ValueError, KeyError, ImportError, FileNotFoundError) as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)
    if _HBM_GIB.value:
        topology = topology._replace(chip=topology.chip.replace(hbm_bytes=_HBM_GIB.value * 2**30))
    chip = topology.chip
    print(f"# {workload.describe()}")
    print(f"# {libtpu_status()}")
    print(f"# {topology.name}: {topology.num_chips} x {chip.name} ({chip.hbm_bytes / 2**30:.0f} "
          f"GiB HBM, {chip.peak_flops / 1e12:.0f} TFLOP/s bf16)")  # fmt: skip
    searcher = Searcher(
        workload, topology, cache=CompileCache(_CACHE_DIR.value or None), reserve=_RESERVE.value
    )
    start = time.time()
    try:
        chosen = _given_placement(topology.num_chips)
        for note in divisibility_notes(workload.model, *chosen) if chosen else ():
            print(f"# note: {note}")
        if chosen:
            cands = [_candidate(_PLACEMENT.value, *chosen)]
            searcher.mesh(cands[0].train_mesh, cands[0].train_devices)  # checks the sizes
            searcher.mesh(cands[0].rollout_mesh, cands[0].rollout_devices)
        else:
            cands = candidates(
                topology.num_chips,
                modes=_MODES.value,
                tensor_parallel=[int(x) for x in _TP.value],
                decode_tensor_parallel=[int(x) for x in _DECODE_TP.value or _TP.value],
                split_fractions=[float(x) for x in _FRACTIONS.value],
            )
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)
    plans = searcher.search(cands)
    text = [f"## {topology.name}: {workload.describe()}", "", plans_table(plans, chip, _TOP.value)]
    best = next((p for p in plans if p.fits), None)
    if best is not None:
        text += ["", f"Phases of the best plan ({best.candidate.label()}):", "",
                 phases_table(best, chip)]  # fmt: skip
        notes = divisibility_notes(workload.model, best.candidate.train_mesh,
                                   best.candidate.rollout_mesh)  # fmt: skip
        text += [""] + [f"Note: {n}" for n in notes] if notes else []
        text += ["", figures_note()]
    else:
        text += ["", "No plan fits: every candidate's figure is listed above."]
    report = "\n".join(text)
    print(report)
    print(f"# searched {len(plans)} placements in {time.time() - start:.0f} s")
    if best is not None:
        print("# chosen: " + " ".join(best.overrides()))
    if _OUT.value:
        os.makedirs(_OUT.value, exist_ok=True)
        with open(os.path.join(_OUT.value, "plan.md"), "w") as f:
            f.write(report + "\n")
        with open(os.path.join(_OUT.value, "plans.json"), "w") as f:
            json.dump([_plan_json(p) for p in plans], f, indent=1)
        if best is not None:
            with open(os.path.join(_OUT.value, "placement.json"), "w") as f:
                json.dump(best.placement, f, indent=1)
            # Dotted overrides for `jaxrl_llm.config.apply_overrides`: placement + chunks.
            overrides = {f"placement.{k}": v for k, v in best.placement.items()}
            overrides.update(best.chunks())
            with open(os.path.join(_OUT.value, "overrides.json"), "w") as f:
                json.dump(overrides, f, indent=1)
            if _SAVE_EXECUTABLES.value:
                directory = os.path.join(_OUT.value, "executables")
                saved, syncs = searcher.save_executables(best, directory)
                print(
                    f"# saved the {', '.join(saved)} executables for {topology.name} in {directory}"
                    f", and the weight sync's {syncs} programs in {directory}/weight_sync "
                    "(listed in weight_sync.json)"
                )
    sys.exit(0 if best is not None else 1)


def _given_placement(num_chips: int):
    """(train mesh, rollout mesh) of --placement, or None to search.

    Raises:
      ValueError: a malformed or missing mesh flag, naming it.
    """
    if _PLACEMENT.value is None:
        return None
    if _PLACEMENT.value not in ("colocated", "split"):
        raise ValueError(f"--placement={_PLACEMENT.value!r} must be 'colocated' or 'split'.")
    meshes = []
    for flag, value in (
        ("--train_mesh", _TRAIN_MESH.value),
        ("--rollout_mesh", _ROLLOUT_MESH.value),
    ):
        try:
            shape = tuple(int(x) for x in value or ())
        except ValueError:
            shape = ()
        if len(shape) != 2 or min(shape) < 1:
            raise ValueError(f"{flag} must be two positive ints data,model (e.g. 16,4).")
        meshes.append(shape)
    train, rollout = meshes
    n_train, n_rollout = train[0] * train[1], rollout[0] * rollout[1]
    needed = n_train if _PLACEMENT.value == "colocated" else n_train + n_rollout
    if needed > num_chips or (_PLACEMENT.value == "colocated" and n_rollout != n_train):
        raise ValueError(
            f"--placement={_PLACEMENT.value} with --train_mesh={train} and --rollout_mesh="
            f"{rollout} needs {needed} chips (colocated meshes must have the same count); the "
            f"topology has {num_chips}."
        )
    return train, rollout


def _candidate(mode: str, train, rollout):
    from jaxrl_llm.scale import Candidate

    n_train = train[0] * train[1]
    if mode == "colocated":
        return Candidate(mode, train, rollout, (0, n_train), (0, n_train))
    return Candidate(mode, train, rollout, (0, n_train), (n_train, rollout[0] * rollout[1]))


def _plan_json(plan) -> dict:
    return {
        "placement": plan.placement,
        "label": plan.candidate.label(),
        "decode_batch": plan.candidate.decode_batch,
        "forward_batch": plan.candidate.forward_batch,
        "fits": plan.fits,
        "reason": plan.reason,
        "step_seconds": None if plan.step_seconds == float("inf") else plan.step_seconds,
        "decode_ms_per_token": plan.decode_ms_per_token,
        "phases": {
            name: {
                "peak_bytes": p.peak_bytes,
                "seconds": p.seconds,
                "bound": p.roofline.bound if p.roofline else None,
                "report": p.report.to_json() if p.report else None,
            }
            for name, p in plan.phases.items()
        },
    }


def _parse_flags(argv):
    """The known flags, after importing the `--import` modules (one line if one fails)."""
    from jaxrl_llm.user_imports import import_from_argv_or_exit

    import_from_argv_or_exit(argv)
    return flags.FLAGS(argv, known_only=True) or argv


def cli():
    """Console entry point."""
    app.run(main, flags_parser=_parse_flags)


if __name__ == "__main__":
    cli()
