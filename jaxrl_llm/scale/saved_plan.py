"""A plan's programs saved for the slice: each phase's executable and the weight sync's.

`save_plan_executables(searcher, plan, directory)` compiles every program of a plan once more
(through the `Searcher` that planned it, `jaxrl_llm.scale.planner`) and saves each with
`jaxrl_llm.sharding.executables.save_executable`, so a run on the slice loads what was planned
(MaxText's `compiled_trainstep_file`, for every phase):

    directory/<phase>                      one executable per phase of the plan
    directory/weight_sync/<nn>_<step>      the weight sync's per-array programs
    directory/weight_sync.json             the shape, dtype and pair of layouts each one serves
"""

from __future__ import annotations

import json
import os

from jaxrl_llm.scale import weight_sync
from jaxrl_llm.scale.placements import Plan
from jaxrl_llm.sharding.executables import compile_for_saving, save_executable


def save_plan_executables(searcher, plan: Plan, directory: str) -> tuple[list[str], int]:
    """Saves every program of `plan` under `directory` (the layout in the module docstring).

    Args:
      searcher: the `jaxrl_llm.scale.planner.Searcher` that planned it (its workload, topology,
        phases and program builders).
      plan: a fitting plan of that searcher.
      directory: where the executables go.

    Returns:
      (the phases saved, the number of weight-sync programs saved).
    """
    c = plan.candidate
    saved = []
    for phase in searcher.phases():
        where = (c.rollout_mesh, c.rollout_devices) if phase == "rollout" else (
            c.train_mesh, c.train_devices)  # fmt: skip
        rows = c.decode_batch if phase == "rollout" else c.forward_batch
        for program in searcher.programs(phase, *where, rows):
            save_executable(
                compile_for_saving(program.lowered),
                os.path.join(directory, program.phase),
                topology=searcher.topology.name,
                phase=program.phase,
            )
            saved.append(program.phase)
    sync = weight_sync.reshard_programs(
        searcher.workload,
        searcher.mesh(c.train_mesh, c.train_devices),
        searcher.mesh(c.rollout_mesh, c.rollout_devices),
    )
    manifest = []
    for index, program in enumerate(sync.programs):
        name, compiled = f"{index:02d}_{program.phase}", compile_for_saving(program.lowered)
        save_executable(
            compiled,
            os.path.join(directory, "weight_sync", name),
            topology=searcher.topology.name,
            phase=program.phase,
        )
        (argument,) = program.lowered.args_info[0]
        manifest.append({
            "file": f"weight_sync/{name}",
            "phase": program.phase,
            "shape": list(argument.shape),
            "dtype": str(argument.dtype),
            "source": str(compiled.input_shardings[0][0]),
            "target": str(compiled.output_shardings),
            "runs": program.runs,
        })  # fmt: skip
    with open(os.path.join(directory, "weight_sync.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    return saved, len(manifest)
