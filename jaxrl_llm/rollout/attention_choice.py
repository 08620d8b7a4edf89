"""Which attention a rollout's decode steps run: `GenerationConfig.decode_attention`, resolved
for the program's platform and KV cache, and the scope its decode loop is traced in.

  "auto"        the platform's kernel (`kernels.decode_attention`: JAX's Pallas paged attention
                on TPU, its split-K decode attention on GPU), which reads only each row's filled
                cache blocks, where it serves the cache (head width, dtype), the cache layout is
                one it can run under (one device, or a `CacheLayout`) and the layout kernels are
                on (`models.partitioning.layout_kernels`); else "xla". On a CPU: "xla".
  "xla"         the masked full-cache attention: every slot of the cache, every step.
  "kernel"      the platform's kernel, refused in one line where it cannot serve the cache; on
                a CPU (no kernel) the jnp reference, which is the "xla" path.
  "pallas_tpu", "pallas_gpu"
                that kernel by name: compiled on its own platform, in Pallas' interpreter on a
                CPU (tests; slow); refused on another accelerator.

With a kernel the decode engine pads the cache to whole kernel blocks
(`kernels.decode_attention.padded_slots`): the padding is never read.
"""

from __future__ import annotations

import jax

from jaxrl_llm.models import partitioning
from jaxrl_llm.models.decode_kernel import DecodeKernel
from jaxrl_llm.models.transformer import KV_CACHE_LOGICAL_AXES
from jaxrl_llm.rollout.kv_cache import CacheLayout
from kernels.decode_attention import IMPLEMENTATIONS, default_implementation, supported

# Every value `GenerationConfig.decode_attention` and `config.rollout.decode_attention` accept.
DECODE_ATTENTION = ("auto", "xla", "kernel", *IMPLEMENTATIONS[1:])


def platform_of(cache_shardings) -> str:
    """The platform a decode program with this cache layout runs on ("tpu", "gpu", "cpu")."""
    if isinstance(cache_shardings, CacheLayout):
        return cache_shardings.mesh.devices.flat[0].platform
    if isinstance(cache_shardings, jax.sharding.Sharding):
        return next(iter(cache_shardings.device_set)).platform
    return jax.default_backend()


def resolve(choice: str, *, head_dim: int, cache_dtype, cache_shardings) -> tuple[str, bool]:
    """(implementation, interpret) of a `DECODE_ATTENTION` choice for a program whose cache has
    heads of `head_dim`, `cache_dtype` and the layout `cache_shardings` (any form of
    `kv_cache.resolve`).

    Raises:
      ValueError: an unknown choice; "kernel" or a kernel by name where it cannot serve the
        cache (head width, dtype, layout); a kernel named for another accelerator.

    Example:
      >>> resolve("auto", head_dim=64, cache_dtype="bfloat16", cache_shardings=None)
      ('pallas_gpu', False)     # on a GPU; ('xla', False) on a CPU
    """
    if choice not in DECODE_ATTENTION:
        raise ValueError(f"decode_attention={choice!r} must be one of {DECODE_ATTENTION}.")
    platform = platform_of(cache_shardings)
    if choice == "xla":
        return "xla", False
    implementation, interpret = choice, False
    if choice in IMPLEMENTATIONS:
        interpret = default_implementation(platform) != choice
        if interpret and platform != "cpu":
            raise ValueError(
                f"decode_attention={choice!r} runs on its own accelerator (or interpreted on a "
                f"CPU); this program is for {platform}: use 'auto' or 'kernel'."
            )
    else:
        implementation = default_implementation(platform)
        if implementation == "xla":  # no kernel on this platform: the jnp reference
            return "xla", False
    why = supported(implementation, head_dim=head_dim, cache_dtype=cache_dtype)
    if cache_shardings is not None and not isinstance(cache_shardings, CacheLayout):
        why = why or "a kernel runs on one device or under a CacheLayout (shard_map per device)"
    if why and choice != "auto":
        raise ValueError(f"decode_attention={choice!r}: {why}; use 'auto' or 'xla'.")
    if why or (choice == "auto" and not partitioning.layout_kernels_enabled()):
        return "xla", False
    return implementation, interpret


def scope(implementation: str, interpret: bool, cache_shardings) -> DecodeKernel:
    """The `models.decode_kernel.DecodeKernel` a decode loop is traced under: the kernel, and
    with a `CacheLayout` its mesh and the cache's PartitionSpec per shape (`shard_map`)."""
    if not isinstance(cache_shardings, CacheLayout):
        return DecodeKernel(implementation, interpret)
    from jaxrl_llm.sharding import logical_to_pspec  # sharding depends on models only

    mesh, rules = cache_shardings.mesh, cache_shardings.rules
    spec = lambda shape: logical_to_pspec(KV_CACHE_LOGICAL_AXES, rules, mesh, tuple(shape))
    return DecodeKernel(implementation, interpret, mesh, spec)
