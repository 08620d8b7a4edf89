"""Pod scale from a CPU: every RL phase compiled ahead of time for a TPU topology, a roofline per
phase from the compiler's figures, and a placement search (`python -m jaxrl_llm.plan`).

  topology   `get_topology("v5e-256")`: the slice's devices from libtpu, no TPU needed
  chips      published ceilings per chip (peak FLOP/s, HBM, ICI), each cited
  workload   `workload_of(config)`: an RL step's shapes and roles from a run config
  programs   each phase lowered with the roles' own functions over shape-only inputs
  analysis   `analyze(program)`: compile, memory, collectives, cached on disk
  hlo        the collectives of an optimized HLO module, with loop trip counts
  costs      FLOPs and HBM bytes per phase, and the roofline
  placements candidate placements, row chunks, the plans a search gives back
  weight_sync the train -> decode weight sync as the programs a run executes
  sync_phases its memory per chip group and its time, from the compiled reports
  planner    fit checks per chip group, chunk choice, ranking through the pipeline model
  report     Markdown tables

See docs/scale.md.
"""

from jaxrl_llm.scale.analysis import CompileCache, ProgramReport, analyze
from jaxrl_llm.scale.chips import CHIPS, Chip, chip, cpu_chip
from jaxrl_llm.scale.costs import (
    PhaseCost,
    Roofline,
    decode_cost,
    forward_cost,
    roofline,
    split_of,
    train_step_cost,
)
from jaxrl_llm.scale.hlo import Collective, collectives
from jaxrl_llm.scale.placements import (
    Candidate,
    PhaseResult,
    Plan,
    candidates,
    decode_batches,
    divisibility_notes,
    forward_batches,
)
from jaxrl_llm.scale.planner import Searcher
from jaxrl_llm.scale.programs import (
    Program,
    actor_train_program,
    critic_train_program,
    critic_values_program,
    reference_program,
    reward_model_program,
    rollout_program,
)
from jaxrl_llm.scale.report import collectives_table, figures_note, phases_table, plans_table
from jaxrl_llm.scale.sync_phases import sync_phases
from jaxrl_llm.scale.topology import (
    TOPOLOGIES,
    Topology,
    get_topology,
    libtpu_status,
    parse_topology_name,
)
from jaxrl_llm.scale.weight_sync import SyncPrograms, reshard_programs
from jaxrl_llm.scale.workload import Workload, model_config_of, workload_of

__all__ = [
    "CHIPS",
    "TOPOLOGIES",
    "Candidate",
    "Chip",
    "Collective",
    "CompileCache",
    "PhaseCost",
    "PhaseResult",
    "Plan",
    "Program",
    "ProgramReport",
    "Roofline",
    "Searcher",
    "SyncPrograms",
    "Topology",
    "Workload",
    "actor_train_program",
    "analyze",
    "candidates",
    "chip",
    "collectives",
    "collectives_table",
    "cpu_chip",
    "critic_train_program",
    "critic_values_program",
    "decode_batches",
    "decode_cost",
    "divisibility_notes",
    "forward_batches",
    "figures_note",
    "forward_cost",
    "get_topology",
    "libtpu_status",
    "model_config_of",
    "parse_topology_name",
    "phases_table",
    "plans_table",
    "reference_program",
    "reshard_programs",
    "reward_model_program",
    "roofline",
    "rollout_program",
    "split_of",
    "sync_phases",
    "train_step_cost",
    "workload_of",
]
