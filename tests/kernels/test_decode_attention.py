"""Decode attention (kernels/decode_attention): the masked reference on hand-worked values, then
JAX's Pallas TPU paged attention and Pallas GPU split-K decode attention in Pallas' interpreter
against it, for rows of different lengths, grouped-query heads, sliding windows and both cache
dtypes; and that the kernels read nothing past each row's last filled block."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from kernels.decode_attention import (
    BlockConfig,
    decode_attention,
    masked_decode_attention,
    padded_slots,
    pallas_gpu,
    pallas_tpu,
    supported,
)

B, S, H = 4, 128, 128
BLOCKS = BlockConfig(block_slots=32, max_splits=2)  # 4 blocks per row, 2 GPU chunks
# One row per case: one slot, inside the first block, a block's last slot, the whole cache.
LENGTHS = np.array([1, 19, 64, 128], np.int32)
# float32: the kernels accumulate in another order than the reference (measured up to 5e-7).
# bfloat16: outputs are rounded to bfloat16 (eps 7.8e-3) on O(1) values, and the GPU kernel
# sums its chunks in bfloat16.
TOLERANCE = {jnp.float32: 1e-5, jnp.bfloat16: 2e-2}
# Each kernel's trace counter: a test asserts it moved, so a fallback cannot pass for the kernel.
KERNELS = {"pallas_tpu": (pallas_tpu.TRACE_COUNTS, "paged"),
           "pallas_gpu": (pallas_gpu.TRACE_COUNTS, "split_k")}  # fmt: skip


def _qkv(heads: int, kv_heads: int, dtype):
    keys = jax.random.split(jax.random.key(0), 3)
    q = jax.random.normal(keys[0], (B, heads, H), jnp.float32)
    k = jax.random.normal(keys[1], (B, kv_heads, S, H), jnp.float32)
    v = jax.random.normal(keys[2], (B, kv_heads, S, H), jnp.float32)
    return q.astype(dtype), k.astype(dtype), v.astype(dtype)


def test_reference_on_hand_worked_values():
    """Two slots with equal scores average their values; a row of length 1 sees slot 0 only;
    a window of 1 sees the last filled slot only."""
    q = jnp.zeros((2, 2, 4))  # zero queries: equal scores over the visible slots
    values = jnp.arange(16.0).reshape(1, 1, 4, 4).repeat(2, axis=0)
    lengths = jnp.array([2, 1])
    out = masked_decode_attention(q, values, values, lengths)
    np.testing.assert_array_equal(out[0], [[2.0, 3.0, 4.0, 5.0]] * 2)  # mean of slots 0, 1
    np.testing.assert_array_equal(out[1], [[0.0, 1.0, 2.0, 3.0]] * 2)
    windowed = masked_decode_attention(q, values, values, jnp.array([3, 3]), window=1)
    np.testing.assert_array_equal(windowed[:, 0], [[8.0, 9.0, 10.0, 11.0]] * 2)  # slot 2


@pytest.mark.parametrize("implementation", sorted(KERNELS))
@pytest.mark.parametrize("heads,kv_heads", [(8, 2), (3, 3)])
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_kernels_equal_the_masked_full_cache_attention(implementation, heads, kv_heads, dtype):
    q, k, v = _qkv(heads, kv_heads, dtype)
    if implementation == "pallas_tpu" and dtype == jnp.float32:
        # The paged kernel computes with bfloat16 pages (its loader casts them): compare with
        # the reference over the same rounded cache, at float32 tolerance.
        k, v = (x.astype(jnp.bfloat16).astype(dtype) for x in (k, v))
    counts, key = KERNELS[implementation]
    before = counts[key]
    got = decode_attention(q, k, v, jnp.asarray(LENGTHS), implementation=implementation,
                           config=BLOCKS, interpret=True)  # fmt: skip
    assert counts[key] == before + 1
    want = masked_decode_attention(q, k, v, jnp.asarray(LENGTHS))
    assert got.dtype == dtype
    np.testing.assert_allclose(
        np.asarray(got, np.float32), np.asarray(want, np.float32), atol=TOLERANCE[dtype]
    )


@pytest.mark.parametrize("implementation", sorted(KERNELS))
def test_kernels_read_nothing_past_the_last_filled_block(implementation):
    """NaN in every slot past each row's last filled block: the masked reference, which reads
    (and weighs by 0) every slot, turns NaN; the kernels do not read those slots at all."""
    q, k, v = _qkv(8, 2, jnp.float32)
    k, v = (x.astype(jnp.bfloat16).astype(jnp.float32) for x in (k, v))
    read = -(-LENGTHS // BLOCKS.block_slots) * BLOCKS.block_slots
    unread = jnp.arange(S)[None, :] >= read[:, None]
    poisoned = [jnp.where(unread[:, None, :, None], jnp.nan, x) for x in (k, v)]
    lengths = jnp.asarray(LENGTHS)
    got = decode_attention(q, *poisoned, lengths, implementation=implementation, config=BLOCKS,
                           interpret=True)  # fmt: skip
    assert np.isnan(np.asarray(masked_decode_attention(q, *poisoned, lengths))[:3]).all()
    np.testing.assert_allclose(got, masked_decode_attention(q, k, v, lengths), atol=1e-5)


@pytest.mark.parametrize("implementation", sorted(KERNELS))
def test_sliding_window_and_a_window_longer_than_the_cache(implementation):
    """A local layer's window (GPU: the kernel's start index; TPU: the reference) and a global
    layer's window past the cache (the kernel, no mask), as `lax.cond` picks per layer."""
    q, k, v = _qkv(8, 2, jnp.float32)
    k, v = (x.astype(jnp.bfloat16).astype(jnp.float32) for x in (k, v))
    lengths = jnp.asarray(LENGTHS)
    for window in (jnp.int32(40), jnp.int32(2**31 - 1)):
        got = decode_attention(q, k, v, lengths, window=window, implementation=implementation,
                               config=BLOCKS, interpret=True)  # fmt: skip
        want = masked_decode_attention(q, k, v, lengths, window=window)
        np.testing.assert_allclose(got, want, atol=1e-5)


def test_what_each_kernel_serves_and_the_cache_length_it_tiles():
    assert supported("pallas_gpu", head_dim=64, cache_dtype="bfloat16") == ""
    assert "power-of-2" in supported("pallas_gpu", head_dim=80, cache_dtype="bfloat16")
    assert supported("pallas_tpu", head_dim=128, cache_dtype="bfloat16") == ""
    assert "head_dim % 128" in supported("pallas_tpu", head_dim=64, cache_dtype="bfloat16")
    assert "rounded" in supported("pallas_tpu", head_dim=128, cache_dtype="float32")
    assert padded_slots(1151, "pallas_gpu") == 1152 and padded_slots(1151, "xla") == 1151
    blocks = BlockConfig(block_slots=128, max_splits=16)
    assert [blocks.splits(128 * n) for n in (1, 9, 16, 22, 32)] == [1, 9, 16, 11, 16]
    with pytest.raises(ValueError, match="block_slots=48 must be a power of 2 >= 16"):
        BlockConfig(block_slots=48)
    q, k, v = _qkv(8, 2, jnp.float32)
    with pytest.raises(ValueError, match="multiple of block_slots=256"):
        decode_attention(q, k, v, jnp.asarray(LENGTHS), implementation="pallas_gpu",
                         config=BlockConfig(block_slots=256), interpret=True)  # fmt: skip


def test_public_names_have_docstrings():
    import kernels.decode_attention as package

    for name in package.__all__:
        obj = getattr(package, name)
        if isinstance(obj, tuple):  # IMPLEMENTATIONS: documented in config.py
            continue
        assert obj.__doc__ and obj.__doc__.strip(), name
