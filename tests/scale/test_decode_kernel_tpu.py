"""The decode attention kernel compiled for TPU (v5e, on this CPU through libtpu): JAX's paged
attention over the contiguous cache viewed as pages with no copy, what "auto" picks on a TPU
layout, and the planner's rollout program running it in its decode loop."""

import re

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import SingleDeviceSharding

from jaxrl_llm.config import config_for, make_tiny
from jaxrl_llm.models import tiny_config
from jaxrl_llm.models.partitioning import layout_kernels
from jaxrl_llm.rollout import CacheLayout
from jaxrl_llm.rollout.attention_choice import resolve
from jaxrl_llm.scale import analyze, rollout_program, workload_of
from jaxrl_llm.sharding import DECODE_RULES, make_mesh
from kernels.decode_attention import decode_attention

# Heads of 128 lanes (the TPU kernel's), bfloat16 compute and cache.
MODEL = tiny_config(vocab_size=512, hidden_size=64, head_dim=128, dtype="bfloat16")


@pytest.fixture(scope="module")
def mesh(v5e_2x2):
    return make_mesh((2, 2), ("data", "model"), devices=v5e_2x2.devices)


def test_paged_kernel_reads_the_cache_in_place(v5e_2x2):
    """The [B, K, S, H] cache enters the Mosaic call as a bitcast of the argument: no copy or
    transpose of cache size anywhere in the compiled program."""
    b, n, k, s, h = 8, 32, 8, 1152, 128
    device = SingleDeviceSharding(v5e_2x2.devices[0])
    q = jax.ShapeDtypeStruct((b, n, h), jnp.bfloat16, sharding=device)
    cache = jax.ShapeDtypeStruct((b, k, s, h), jnp.bfloat16, sharding=device)
    lengths = jax.ShapeDtypeStruct((b,), jnp.int32, sharding=device)
    paged = lambda *args: decode_attention(*args, implementation="pallas_tpu")
    hlo = jax.jit(paged).lower(q, cache, cache, lengths).compile().as_text()
    assert "paged_attention" in hlo
    # The op making each array of the cache's size (as [B, K, S, H] or as 128-slot pages).
    shapes = rf"bf16\[(?:1,{b * k * s // 128},128,128|{b},{k},{s},{h})\]"
    cache_sized = re.findall(rf"= {shapes}{{[^}}]*}} ([\w-]+)\(", hlo)
    assert cache_sized and set(cache_sized) <= {"bitcast", "parameter"}, cache_sized


def test_auto_picks_the_paged_kernel_where_it_fits(mesh):
    layout = CacheLayout(mesh, DECODE_RULES)
    fits = dict(head_dim=128, cache_dtype="bfloat16", cache_shardings=layout)
    assert resolve("auto", **fits) == ("pallas_tpu", False)
    assert resolve("kernel", **fits) == ("pallas_tpu", False)
    with layout_kernels(False):  # the planner's with / without kernels comparison
        assert resolve("auto", **fits) == ("xla", False)
    assert resolve("auto", **{**fits, "head_dim": 64}) == ("xla", False)  # Llama-3.2-1B
    assert resolve("auto", **{**fits, "cache_dtype": "float32"}) == ("xla", False)
    with pytest.raises(ValueError, match="head_dim % 128 == 0; head_dim=64; use 'auto' or"):
        resolve("kernel", **{**fits, "head_dim": 64})
    with pytest.raises(ValueError, match="this program is for tpu"):
        resolve("pallas_gpu", **fits)


def _workload(decode_attention: str):
    config = make_tiny(config_for("grpo"))
    with config.unlocked():
        config.model.dtype = "bfloat16"
        config.rollout.min_prompt_bucket = 16
        config.rollout.decode_attention = decode_attention
    return workload_of(config, MODEL)


def test_rollout_program_runs_the_kernel_in_its_decode_loop(mesh):
    """The planner's decode program on v5e 2x2 (rows over "data", KV heads over "model"): with
    "auto" the paged kernel is lowered (a Mosaic call per layer in the loop) and compiles;
    with "xla" none is."""
    kernel = rollout_program(_workload("auto"), mesh)
    plain = rollout_program(_workload("xla"), mesh)
    assert kernel.key != plain.key
    assert kernel.lowered.as_text().count("paged_attention") >= MODEL.num_layers
    assert "paged_attention" not in plain.lowered.as_text()
    assert analyze(kernel).peak_bytes > 0
