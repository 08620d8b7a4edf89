"""Command line: `python -m jaxrl_llm.main --config CONFIG.py --workdir DIR [--config.a.b=value]`.

`--gin_file F.gin` and `--gin_bindings 'loss.clip_low = 0.1'` (both repeatable) set config fields
through `jaxrl_llm.gin_bindings`; a binding wins over the config file and `--config.*` flags.
`--import MODULE` (repeatable) imports a researcher's module first (`jaxrl_llm.user_imports`);
the run records it, so a resume, `evaluate --workdir` and sweeps import it again.

Parses flags, validates the config once (`validate_stage`) and calls
`jaxrl_llm.stages.run_stage(config, workdir)`, which does not check it again; nothing else
lives here.
The algorithm is the config's (`config.algorithm`; experiments/configs/<algorithm>_*.py); a config
with `stage = "sft"` runs the SFT stage (experiments/configs/sft_*.py).
"""

from __future__ import annotations

import os
import sys

from absl import app, flags, logging
from ml_collections import config_flags

from jaxrl_llm import compilation_cache

_CONFIG = config_flags.DEFINE_config_file("config", None, "A config file with get_config().")
_WORKDIR = flags.DEFINE_string(
    "workdir", None, "Run directory (checkpoints, metrics); resumes if it has a checkpoint."
)
_NO_PROGRESS = flags.DEFINE_bool("no_progress", False, "Hide the progress bar.")
_IMPORTS = flags.DEFINE_multi_string(
    "import",
    [],
    "A module (dotted name) or .py file that registers tasks, rewards, scorers or algorithms, "
    "imported before the config loads; repeatable. The run records it (imports.json).",
)
_DEBUG = flags.DEFINE_bool(
    "debug", False, "Show the Python traceback of an error instead of one line."
)
_GIN_FILES = flags.DEFINE_multi_string(
    "gin_file",
    [],
    "gin files binding hyper-parameters (see jaxrl_llm/gin_bindings.py); repeatable.",
)
_GIN_BINDINGS = flags.DEFINE_multi_string(
    "gin_bindings",
    [],
    "gin bindings, e.g. 'loss.clip_low = 0.1'; repeatable, after --gin_file.",
)
_CACHE = flags.DEFINE_string(
    "compilation_cache",
    compilation_cache.DEFAULT_DIRECTORY,
    "Directory of JAX's persistent compilation cache (a resumed or repeated run skips most "
    "compilation); empty to disable.",
)


def main(argv):
    """absl's entry point: validates the config from the flags, then runs its stage."""
    del argv
    from jaxrl_llm.stages import run_stage, validate_stage

    logging.set_verbosity(logging.WARNING)  # orbax logs every file it writes at INFO
    from jaxrl_llm import distributed

    distributed.initialize()  # joins a multi-process run (JAX_* variables); else nothing
    config = _CONFIG.value
    if _CACHE.value:
        compilation_cache.use_compilation_cache(_CACHE.value)
    if config is None or _WORKDIR.value is None:
        raise app.UsageError("--config and --workdir are required.")
    try:
        from jaxrl_llm.user_imports import import_all, record_imports, recorded_imports

        # a resumed run's own imports first (the new flags were imported while parsing)
        imports = import_all([*recorded_imports(_WORKDIR.value), *_IMPORTS.value])
        gin_text = _parse_gin(_GIN_FILES.value, _GIN_BINDINGS.value)
        if gin_text:
            from jaxrl_llm import gin_bindings

            gin_bindings.apply_to_config(config)
        validate_stage(config)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    record_imports(_WORKDIR.value, imports)
    if gin_text:
        # gin bindings win over the config fields they shadow; keep them next to config.json.
        os.makedirs(_WORKDIR.value, exist_ok=True)
        with open(os.path.join(_WORKDIR.value, "config.gin"), "w") as f:
            f.write(gin_text)
    try:
        run_stage(config, _WORKDIR.value, progress=not _NO_PROGRESS.value)
    except _user_errors() as e:
        if _DEBUG.value:
            raise
        from jaxrl_llm.config import error_line

        print(f"error: {error_line(e)} (--debug shows the traceback)", file=sys.stderr)
        sys.exit(1)
    import jax

    if jax.process_index() == 0:  # the curves and the outputs' place, once per run
        from jaxrl_llm.plots import plot_finished_run

        plot_finished_run(_WORKDIR.value)


def _user_errors() -> tuple[type[BaseException], ...]:
    from jaxrl_llm.runners import NonFiniteLossError

    # A bad value, a missing file (model, data), an unknown name (task, model), a full disk,
    # a run that diverged: one line each. Anything else is a bug and keeps its traceback.
    return (ValueError, KeyError, OSError, NonFiniteLossError)


def _parse_gin(gin_files, gin_bindings) -> str:
    """Parses --gin_file / --gin_bindings (nothing when both are empty); returns the gin text."""
    if not gin_files and not gin_bindings:
        return ""
    from jaxrl_llm import gin_bindings as gin_lib

    return gin_lib.parse(gin_files, gin_bindings)


def _parse_flags(argv):
    """absl flag parsing with a one-line error (and close matches) for an unknown config key;
    the `--import` modules are imported first, so the config file may use what they register."""
    from jaxrl_llm.user_imports import import_from_argv_or_exit

    import_from_argv_or_exit(argv)
    try:
        return flags.FLAGS(argv)
    except (flags.Error, AttributeError, KeyError, ValueError, TypeError) as e:
        from jaxrl_llm.config import error_line
        from jaxrl_llm.config_files import config_file_error, unknown_config_flag

        message = unknown_config_flag(argv) or config_file_error(argv) or error_line(e)
        print(f"error: {message}", file=sys.stderr)
        sys.exit(2)


def cli():
    """Console entry point (`jaxrl-llm`)."""
    app.run(main, flags_parser=_parse_flags)


if __name__ == "__main__":
    cli()
