"""Command line: `python -m jaxrl_llm.main --config CONFIG.py --workdir DIR [--config.a.b=value]`.

Parses flags and calls `jaxrl_llm.runners.train(config, workdir)`; nothing else lives here.
"""

from __future__ import annotations

import os
import sys

from absl import app, flags, logging
from ml_collections import config_flags

_CONFIG = config_flags.DEFINE_config_file("config", None, "A config file with get_config().")
_WORKDIR = flags.DEFINE_string("workdir", None, "Run directory (checkpoints, metrics); resumes if it has a checkpoint.")
_NO_PROGRESS = flags.DEFINE_bool("no_progress", False, "Hide the progress bar.")
_CACHE = flags.DEFINE_string(
    "compilation_cache",
    os.path.join(os.path.expanduser("~"), ".cache", "jaxrl_llm", "xla"),
    "Directory of JAX's persistent compilation cache (a resumed or repeated run skips most "
    "compilation); empty to disable.",
)


def main(argv):
    del argv
    from jaxrl_llm.config import validate_config
    from jaxrl_llm.runners import train

    logging.set_verbosity(logging.WARNING)  # orbax logs every file it writes at INFO
    config = _CONFIG.value
    if _CACHE.value:
        import jax

        jax.config.update("jax_compilation_cache_dir", _CACHE.value)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 2.0)
    if config is None or _WORKDIR.value is None:
        raise app.UsageError("--config and --workdir are required.")
    try:
        validate_config(config)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    train(config, _WORKDIR.value, progress=not _NO_PROGRESS.value)


def _parse_flags(argv):
    """absl flag parsing with a one-line error (and close matches) for an unknown config key."""
    try:
        return flags.FLAGS(argv)
    except (flags.Error, AttributeError, KeyError, ValueError, TypeError) as e:
        message = str(e).replace("\\n", " ").replace("\n", " ").strip("'\" ")
        print(f"error: {message}", file=sys.stderr)
        sys.exit(2)


def cli():
    """Console entry point (`jaxrl-llm`)."""
    app.run(main, flags_parser=_parse_flags)


if __name__ == "__main__":
    cli()
