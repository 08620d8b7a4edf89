"""What a constrained run holds: its mode, judges, bounds and length budgets.

The data that `jaxrl_llm.constraints.config` builds from `config.constraints` and
`jaxrl_llm.algorithms.constrained.constrain` acts on (Tessler et al. 2019's Lagrangian
relaxation; CGPO, Xu et al. 2024, for the judge-filter modes).
"""

from __future__ import annotations

import dataclasses

MODES = ("none", "lagrangian", "crpg", "crraft", "codpo")


@dataclasses.dataclass(frozen=True)
class ConstraintSpec:
    """What a constrained run holds.

    Attributes:
      mode: one of `MODES`.
      judges: the K judge names, in the order of `Experience.violations`.
      bounds: [K] allowed violation rate of each judge (mode "lagrangian").
      budgets: prompt class -> token budget (the C length constraints, any mode).
      dual_lr: the multipliers' dual-ascent step.
      max_multiplier: their upper clip.
    """

    mode: str
    judges: tuple[str, ...] = ()
    bounds: tuple[float, ...] = ()
    budgets: dict[str, int] = dataclasses.field(default_factory=dict)
    dual_lr: float = 0.5
    max_multiplier: float = 10.0

    @property
    def names(self) -> tuple[str, ...]:
        """Names of the constraints with multipliers: the judges (lagrangian mode), then
        "length/<class>" per budget."""
        judged = self.judges if self.mode == "lagrangian" else ()
        return judged + tuple(f"length/{c}" for c in self.budgets)
