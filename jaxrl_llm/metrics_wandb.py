"""Weights & Biases as a second destination of a run's metrics (the optional `wandb` extra).

`config.metrics` says where `jaxrl_llm.metrics.MetricsWriter` sends what it writes: TensorBoard
event files (on by default) and, with `config.metrics.wandb = True`, a wandb run that gets the
same scalars (`run.log(values, step=step)`) and the same text samples (a `wandb.Table` under
"samples"). The default mode is "offline": the run is written under `<workdir>/wandb/` without a
network, and `wandb sync <workdir>/wandb/offline-run-*` uploads it later.

    --config.metrics.wandb=True --config.metrics.wandb_project=my_project

The run's id is kept in `<workdir>/wandb_run_id`, so a resumed run continues the same wandb run.
wandb cannot take back what it was sent: after a resume (`MetricsWriter.rewind`) the steps a
killed process logged past its last checkpoint stay in wandb, and wandb drops the resumed run's
rows for steps at or below the last step it already holds (TensorBoard and the JSONL files hold
the resumed values).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import ml_collections

__all__ = [
    "RUN_ID_FILE",
    "WANDB_MODES",
    "WandbWriter",
    "metrics_section",
    "validate_metrics_section",
    "wandb_writer_for",
]

# "offline": written under <workdir>/wandb, uploaded later with `wandb sync`; "online": sent as
# the run goes (needs a network and `wandb login`); "disabled": wandb's no-op run.
WANDB_MODES = ("offline", "online", "disabled")
RUN_ID_FILE = "wandb_run_id"


def metrics_section() -> ml_collections.ConfigDict:
    """The default `config.metrics`: TensorBoard on, wandb off."""
    c = ml_collections.ConfigDict()
    # TensorBoard event files under <workdir>/tensorboard (tensorboardX; view them with the
    # `tensorboard` extra: `tensorboard --logdir <workdir>/tensorboard`).
    c.tensorboard = True
    # Also log scalars and samples to a wandb run (the `wandb` extra).
    c.wandb = False
    # wandb's mode, one of WANDB_MODES; the WANDB_MODE environment variable wins over it.
    c.wandb_mode = "offline"
    # wandb project and entity (team or user; "" for wandb's default).
    c.wandb_project = "jaxrl_llm"
    c.wandb_entity = ""
    # The run's display name ("" for the workdir's folder name).
    c.wandb_name = ""
    return c


def validate_metrics_section(config: ml_collections.ConfigDict) -> None:
    """Checks `config.metrics` (absent in configs written before it existed: nothing to check).

    Raises:
      ValueError: naming the bad field and the fix.
    """
    metrics = config.get("metrics")
    if metrics is None or not metrics.wandb:
        return
    if metrics.wandb_mode not in WANDB_MODES:
        raise ValueError(
            f"config.metrics.wandb_mode={metrics.wandb_mode!r} must be one of {WANDB_MODES}."
        )
    _import_wandb()


def _import_wandb():
    try:
        import wandb
    except ImportError as e:
        raise ValueError(
            f"config.metrics.wandb=True needs wandb ({e}): pip install -e '.[wandb]', or set "
            "config.metrics.wandb=False."
        ) from e
    return wandb


def _run_id(workdir: str) -> str:
    """The wandb run id of `workdir`: read from `RUN_ID_FILE`, or made and kept there."""
    path = os.path.join(workdir, RUN_ID_FILE)
    if os.path.exists(path):
        with open(path) as f:
            run_id = f.read().strip()
        if run_id:
            return run_id
    run_id = uuid.uuid4().hex[:12]
    with open(path, "w") as f:
        f.write(run_id + "\n")
    return run_id


def _cell(value: Any) -> Any:
    """A table cell: numbers and booleans as they are, anything else as text."""
    return value if isinstance(value, bool | int | float) or value is None else str(value)


class WandbWriter:
    """Logs a run's scalars and samples to one wandb run (the wandb side of `MetricsWriter`).

    Args:
      workdir: the run directory; wandb writes under `workdir/wandb`.
      project: the wandb project.
      mode: one of `WANDB_MODES`.
      entity: the wandb team or user (None: wandb's default).
      name: the run's display name (None: the workdir's folder name).
      config: the run's config, recorded with the run.
    """

    def __init__(
        self,
        workdir: str,
        *,
        project: str,
        mode: str = "offline",
        entity: str | None = None,
        name: str | None = None,
        config: Mapping[str, Any] | None = None,
    ):
        wandb = _import_wandb()
        self._wandb = wandb
        self.run = wandb.init(
            project=project,
            entity=entity or None,
            name=name or os.path.basename(os.path.normpath(workdir)),
            dir=workdir,
            id=_run_id(workdir),
            resume="allow",
            mode=os.environ.get("WANDB_MODE", mode),
            config=dict(config or {}),
            reinit="create_new",  # several runs in one process (sweeps, notebooks) stay apart
        )

    def write_scalars(self, step: int, values: Mapping[str, float]) -> None:
        """Logs `values` (already floats) at `step`."""
        self.run.log(dict(values), step=int(step))

    def write_samples(self, step: int, samples: Sequence[Mapping[str, Any]]) -> None:
        """Logs `samples` as one table under "samples": a column per key, in first-seen order."""
        if not samples:
            return
        columns = list(dict.fromkeys(key for sample in samples for key in sample))
        rows = [[_cell(sample.get(key)) for key in columns] for sample in samples]
        table = self._wandb.Table(columns=columns, data=rows, allow_mixed_types=True)
        self.run.log({"samples": table}, step=int(step))

    def close(self) -> None:
        """Finishes the run (an offline run's files are complete after this)."""
        self.run.finish()


def wandb_writer_for(config: ml_collections.ConfigDict, workdir: str) -> WandbWriter | None:
    """The `WandbWriter` `config.metrics` asks for, or None (wandb off, or no metrics section)."""
    validate_metrics_section(config)
    metrics = config.get("metrics")
    if metrics is None or not metrics.wandb:
        return None
    return WandbWriter(
        workdir,
        project=metrics.wandb_project,
        mode=metrics.wandb_mode,
        entity=metrics.wandb_entity,
        name=metrics.wandb_name,
        config=config.to_dict(),
    )
