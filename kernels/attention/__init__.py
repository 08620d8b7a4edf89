"""Causal self-attention kernels for training-length sequences (no KV cache).

``splash_tpu.causal_attention``: JAX's Pallas TPU splash attention (block-sparse flash attention)
with grouped-query heads, packed-row segment ids and sliding windows. The XLA path it replaces
is ``jaxrl_llm.models.layers.grouped_query_attention``, the numeric reference of its tests.
"""

from kernels.attention.splash_tpu import causal_attention, supported

__all__ = ["causal_attention", "supported"]
