"""JAX's persistent compilation cache, as the command line uses it.

A compiled program is written to a directory and read back by the next process that compiles
the same program, so a user's second run (a repeat, a resume, the next seed) skips most of the
tens of seconds its first spent compiling. `python -m jaxrl_llm.main` turns it on in
`DEFAULT_DIRECTORY` (its `--compilation_cache` flag), and a benchmark that times training turns
it on or off explicitly and says which (`experiments/benchmarks/time_to_accuracy.py`).

    state = use_compilation_cache("~/.cache/jaxrl_llm/xla")   # "cold" or "warm"
    use_compilation_cache(None)                               # "off": every compile counts
"""

from __future__ import annotations

import os

__all__ = ["DEFAULT_DIRECTORY", "MIN_COMPILE_S", "use_compilation_cache"]

DEFAULT_DIRECTORY = os.path.join(os.path.expanduser("~"), ".cache", "jaxrl_llm", "xla")
# Programs that compile faster than this are not written (small ones cost more to read back).
MIN_COMPILE_S = 2.0


def use_compilation_cache(directory: str | None, *, min_compile_s: float = MIN_COMPILE_S) -> str:
    """Turns JAX's persistent compilation cache on in `directory`, or off (None or "").

    Returns:
      "off"; "cold" when the directory held no entry yet (this process compiles and writes);
      "warm" when it held some (a later run of the same programs reads them).
    """
    import jax

    if not directory:
        jax.config.update("jax_enable_compilation_cache", False)
        return "off"
    directory = os.path.expanduser(directory)
    warm = os.path.isdir(directory) and any(os.scandir(directory))
    jax.config.update("jax_enable_compilation_cache", True)
    jax.config.update("jax_compilation_cache_dir", directory)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", min_compile_s)
    return "warm" if warm else "cold"
