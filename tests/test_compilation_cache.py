"""The persistent compilation cache as the command line and the timing benchmarks use it: off,
cold (an empty directory) or warm (one an earlier run filled), said in one word."""

import jax
import pytest

from jaxrl_llm.compilation_cache import MIN_COMPILE_S, use_compilation_cache

_KEYS = (
    "jax_enable_compilation_cache",
    "jax_compilation_cache_dir",
    "jax_persistent_cache_min_compile_time_secs",
)


@pytest.fixture
def restored_jax_config():
    """Puts the process's compilation-cache settings back after the test."""
    saved = {key: getattr(jax.config, key) for key in _KEYS}
    yield
    for key, value in saved.items():
        jax.config.update(key, value)


def test_off_cold_and_warm(tmp_path, restored_jax_config):
    assert use_compilation_cache(None) == "off" and not jax.config.jax_enable_compilation_cache
    assert use_compilation_cache("") == "off"
    directory = tmp_path / "xla"
    assert use_compilation_cache(str(directory)) == "cold"  # not there yet
    assert jax.config.jax_enable_compilation_cache
    assert jax.config.jax_compilation_cache_dir == str(directory)
    assert jax.config.jax_persistent_cache_min_compile_time_secs == MIN_COMPILE_S
    directory.mkdir()
    assert use_compilation_cache(str(directory)) == "cold"  # there, empty
    (directory / "entry").write_bytes(b"x")
    assert use_compilation_cache(str(directory), min_compile_s=0.0) == "warm"
    assert jax.config.jax_persistent_cache_min_compile_time_secs == 0.0


def test_a_compiled_program_is_written_and_the_directory_turns_warm(tmp_path, restored_jax_config):
    from jax.experimental.compilation_cache import compilation_cache

    directory = str(tmp_path / "xla")
    assert use_compilation_cache(directory, min_compile_s=0.0) == "cold"
    compilation_cache.reset_cache()  # the process's cache object follows the new directory
    jax.jit(lambda x: x * 3 + 1).lower(jax.numpy.ones(7)).compile()
    assert use_compilation_cache(directory) == "warm"
    compilation_cache.reset_cache()
