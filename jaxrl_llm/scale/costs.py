"""A roofline per RL phase: FLOPs over peak, HBM bytes over bandwidth, collectives over ICI.

    t(phase) = max(FLOPs / peak, HBM bytes / HBM bandwidth, collective bytes / ICI bandwidth)

(Williams et al., "Roofline", CACM 2009; the TPU form of "How to Scale Your Model", Austin et
al. 2025.) The three terms overlap on TPUs (XLA runs collectives asynchronously beside compute),
so the phase takes the largest; `bound` names it. A decode step adds a floor that no term
covers, `Chip.step_overhead_s` per layer (measured on the H200, unknown and 0 on TPUs).

Where the figures come from:
  - collectives: the compiled program's optimized HLO (`jaxrl_llm.scale.hlo`), each op times
    its loop trip counts, each at the bandwidth of the torus dimensions its groups span;
  - FLOPs and HBM bytes: counted here from the model's shapes, for exactly the computation the
    library's programs run (the XLA attention computes the full [T, T] score square; the fused
    log-prob kernel recomputes logit tiles: 4 matmuls of the unembedding per train step on the
    XLA path, 5 with the Pallas TPU kernel; full remat recomputes the layer forward). The
    compiler's own `cost_analysis()` counts a while loop's body once (the layer scan, the
    vocabulary blocks, the decode loop), so its totals undercount by the trip counts; it is
    kept beside ours in reports, and tests check our count against it on loop-free programs.

Per-device figures assume an even split over the devices that hold a dimension; a dimension
that does not divide its mesh axis (e.g. 28 heads over 8) is replicated and counted on every
device, as the rule sets place it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from jaxrl_llm.models.config import LOCAL_ATTENTION, ModelConfig
from jaxrl_llm.scale.chips import Chip
from kernels.decode_attention import DEFAULT_BLOCKS
from kernels.logprobs import default_config

# Matmuls of the unembedding per train step, by log-prob implementation (kernels/logprobs):
# naive materialises the logits (forward, dh, dW); the blocked paths recompute the tile.
LOGPROB_MATMULS = {"naive": 3, "xla": 4, "pallas_gpu": 4, "pallas_tpu": 5}
# Activation traffic per token and layer, in elements of the model dtype, one forward pass:
# the residual stream and norms (~6 D), the MLP's gate / up / activation (~4 F), the attention
# projections (~3 (N + 2K) H). A first-order count; the weights and the attention scores
# dominate at the sizes the planner is for.
_RESIDUAL_RW, _MLP_RW, _QKV_RW = 6, 4, 3
# Passes over the [T, T] float32 scores of the XLA attention per forward: write the scores,
# read them for the softmax, write the weights, read them for the weighted sum.
_SCORE_PASSES = 4


class PhaseCost(NamedTuple):
    """One phase's work on one device.

    Attributes:
      flops: FLOPs per device.
      hbm_bytes: HBM bytes read and written per device.
      comm_seconds: seconds of collectives (from the compiled HLO), 0 when none.
      steps: sequential steps the figures cover (decode steps; 1 otherwise).
      layers_executed: decoder layers run one after another (for the per-layer overhead).
    """

    flops: float
    hbm_bytes: float
    comm_seconds: float = 0.0
    steps: int = 1
    layers_executed: int = 0

    def __add__(self, other: PhaseCost) -> PhaseCost:  # type: ignore[override]
        return PhaseCost(
            self.flops + other.flops,
            self.hbm_bytes + other.hbm_bytes,
            self.comm_seconds + other.comm_seconds,
            self.steps + other.steps,
            self.layers_executed + other.layers_executed,
        )

    def scaled(self, factor: float) -> PhaseCost:
        """The cost of running this `factor` times."""
        return PhaseCost(
            self.flops * factor,
            self.hbm_bytes * factor,
            self.comm_seconds * factor,
            int(round(self.steps * factor)),
            int(round(self.layers_executed * factor)),
        )


class Roofline(NamedTuple):
    """Predicted seconds of a phase and which ceiling bounds it.

    Attributes:
      seconds: the prediction: max of the three terms, plus the per-layer overhead.
      compute_s, memory_s, comm_s, overhead_s: the terms.
      bound: "compute", "memory" or "comm".
    """

    seconds: float
    compute_s: float
    memory_s: float
    comm_s: float
    overhead_s: float
    bound: str


def roofline(cost: PhaseCost, chip: Chip) -> Roofline:
    """The roofline time of `cost` on `chip` (see the module docstring)."""
    terms = {
        "compute": cost.flops / chip.peak_flops,
        "memory": cost.hbm_bytes / chip.hbm_bandwidth,
        "comm": cost.comm_seconds,
    }
    bound = max(terms, key=terms.get)
    overhead = cost.layers_executed * chip.step_overhead_s
    return Roofline(
        terms[bound] + overhead,
        terms["compute"],
        terms["memory"],
        terms["comm"],
        overhead,
        bound,
    )


class Split(NamedTuple):
    """How a mesh splits the model's dimensions (1 = replicated).

    Attributes:
      rows: over the batch ("data" axis, when the rows divide it).
      heads: attention (query and KV heads both divide the model axis).
      mlp: the MLP width.
      vocab: the vocabulary.
      weights_fsdp: FSDP split of the stored weights (train layout; 1 for decode).
    """

    rows: int
    heads: int
    mlp: int
    vocab: int
    weights_fsdp: int = 1


def split_of(config: ModelConfig, rows: int, data: int, model: int, *, fsdp: bool) -> Split:
    """The `Split` of a (data, model) mesh under the library's rule sets (`TRAIN_RULES` with
    `fsdp=True`, `DECODE_RULES` without): a dimension splits only when its size divides."""
    divides = lambda n, m: m if n % m == 0 else 1
    heads = model if config.num_heads % model == 0 and config.num_kv_heads % model == 0 else 1
    return Split(
        rows=divides(rows, data),
        heads=heads,
        mlp=divides(config.intermediate_size, model),
        vocab=divides(config.vocab_size, model),
        weights_fsdp=divides(config.hidden_size, data) if fsdp else 1,
    )


def layer_params(config: ModelConfig) -> tuple[int, int]:
    """(attention, MLP) matmul parameters of one decoder layer."""
    d, f, h = config.hidden_size, config.intermediate_size, config.head_dim
    n, k = config.num_heads, config.num_kv_heads
    return d * n * h + 2 * d * k * h + n * h * d, 3 * d * f


def _window_keys(config: ModelConfig, keys: float, *, kernel: bool, causal: bool = True):
    """Keys each query attends to, per layer [L]: the XLA path computes every key (masked); a
    kernel computes only the visible ones: half of a causal square (`causal`, a prompt or a
    train row) or every key of one decode query, and at most the window on local layers."""
    types = config.layer_types or ("full_attention",) * config.num_layers
    if not kernel:
        return np.full(len(types), keys, np.float64)
    window = float(config.sliding_window or keys)
    visible = keys / 2 if causal else keys
    return np.asarray(
        [min(window, keys) if t == LOCAL_ATTENTION else visible for t in types], np.float64
    )


def _dtype_bytes(config: ModelConfig) -> int:
    return int(np.dtype(config.jnp_dtype).itemsize)


def forward_cost(
    config: ModelConfig,
    rows: int,
    length: int,
    split: Split,
    *,
    attention_kernel: bool = False,
    with_unembedding: bool = True,
    scalar_head: bool = False,
) -> PhaseCost:
    """One forward pass of `rows` sequences of `length` tokens (reference, critic, reward model
    log-probs / scores), per device. `scalar_head`: a value or reward model's [D] head on every
    token instead of the [D, V] unembedding (a scalar-head model has none)."""
    attn_p, mlp_p = layer_params(config)
    b = _dtype_bytes(config)
    rows_local = rows / split.rows
    tokens = rows_local * length
    n, h, k = config.num_heads, config.head_dim, config.num_kv_heads
    keys = _window_keys(config, length, kernel=attention_kernel)
    score_flops = float(np.sum(4 * rows_local * length * keys * n * h)) / split.heads
    matmul_flops = config.num_layers * 2 * tokens * (attn_p / split.heads + mlp_p / split.mlp)
    flops = matmul_flops + score_flops
    weights = config.num_layers * (attn_p / split.heads + mlp_p / split.mlp) * b
    act = (
        config.num_layers
        * tokens
        * b
        * (
            _RESIDUAL_RW * config.hidden_size
            + _MLP_RW * config.intermediate_size / split.mlp
            + _QKV_RW * (n + 2 * k) * h / split.heads
        )
    )
    scores = (
        0.0
        if attention_kernel
        else float(np.sum(_SCORE_PASSES * 4 * rows_local * length * keys * n)) / split.heads
    )
    hbm = weights + act + scores
    if scalar_head:
        flops += 2 * tokens * config.hidden_size
        hbm += config.hidden_size * 4  # the float32 head
    elif with_unembedding:
        unembed = config.hidden_size * config.vocab_size / split.vocab
        flops += 2 * tokens * unembed
        hbm += unembed * b
    return PhaseCost(flops, hbm, layers_executed=config.num_layers)


def train_step_cost(
    config: ModelConfig,
    rows: int,
    length: int,
    split: Split,
    *,
    remat: str = "full",
    lora: bool = False,
    logprob_implementation: str = "xla",
    attention_kernel: bool = False,
    trained_params: int | None = None,
    logprob_block_t: int | None = None,
    scalar_head: bool = False,
) -> PhaseCost:
    """One optimizer update on `rows` sequences of `length` tokens, per device.

    Layers: forward, backward (2x: activations and weights; 1x with LoRA, whose base weights
    get no gradient), plus a recomputed forward under remat="full" (the attention scores alone
    under "dots"). Unembedding: `LOGPROB_MATMULS[logprob_implementation]` matmuls, the [D, V]
    matrix read once per row block of `logprob_block_t` tokens (default: the kernel's block);
    with `scalar_head` (the critic's train step) a [D] head instead, forward and backward.
    Optimizer: AdamW reads the parameters, gradients and two moments and writes three of them.
    """
    fwd = forward_cost(config, rows, length, split, attention_kernel=attention_kernel,
                       with_unembedding=False)  # fmt: skip
    attn_p, mlp_p = layer_params(config)
    rows_local = rows / split.rows
    tokens = rows_local * length
    b = _dtype_bytes(config)
    n, h = config.num_heads, config.head_dim
    keys = _window_keys(config, length, kernel=attention_kernel)
    score_flops = float(np.sum(4 * rows_local * length * keys * n * h)) / split.heads
    backward = 1.0 if lora else 2.0
    recompute = {"full": 1.0, "none": 0.0, "dots": 0.0}[remat]
    flops = fwd.flops * (1 + backward + recompute)
    if remat == "dots":
        flops += score_flops  # attention's batched dots are recomputed
    hbm = fwd.hbm_bytes * (1 + backward + recompute)
    if scalar_head:  # [B, T, D] @ [D]: forward, then the activations' and the head's gradients
        flops += 3 * 2 * tokens * config.hidden_size
        hbm += 3 * config.hidden_size * 4
    else:
        unembed = config.hidden_size * config.vocab_size / split.vocab
        matmuls = LOGPROB_MATMULS.get(logprob_implementation, 4)
        if logprob_block_t is None:  # the kernel's own row block for this width
            impl = (
                logprob_implementation if logprob_implementation in ("xla", "pallas_tpu") else "xla"
            )
            logprob_block_t = default_config(impl, model_dim=config.hidden_size).block_t
        flops += matmuls * 2 * tokens * unembed
        hbm += matmuls * np.ceil(tokens / logprob_block_t) * unembed * b
    params = config.num_params() if trained_params is None else trained_params
    local_params = params / (split.weights_fsdp * max(split.mlp, 1))
    flops += 12 * local_params
    # AdamW over the stored weights (float32 master weights and moments under mixed
    # precision), and the in-step cast of the master to the compute dtype
    pb = int(np.dtype(config.jnp_param_dtype).itemsize) if config.param_dtype else b
    hbm += 7 * local_params * pb
    if pb != b:
        hbm += local_params * (pb + b)
    return PhaseCost(flops, hbm, layers_executed=config.num_layers)


def model_flops(config: ModelConfig, rows: int, length: int, *, causal: bool = True) -> float:
    """The useful FLOPs of one train step on `rows` sequences of `length` tokens, counted as
    MaxText counts them for its MFU (`calculate_tflops_training_per_device`): 3 x (forward)
    for forward and backward, where the forward is the layers' matmuls (Q, K, V, output, MLP),
    the unembedding once (the embedding is a lookup) and the attention's QK^T and PV, over
    the lower triangle when `causal` (MaxText's current code; its published Llama figures
    counted the whole square), at most the window on local layers. Recomputation
    (remat) and the optimizer are not useful work and are not counted; unlike 6 N per token,
    the input embedding table is not counted either.

    Example:
      >>> from jaxrl_llm.models import ModelConfig
      >>> c = ModelConfig(vocab_size=8, hidden_size=4, intermediate_size=8, num_layers=1,
      ...                 num_heads=2, num_kv_heads=1, head_dim=2)
      >>> model_flops(c, 1, 2) == 3 * (2 * 2 * (4 * 4 + 2 * 4 * 2 + 4 * 4 + 3 * 4 * 8 + 4 * 8)
      ...                              + 4 * 2 * 1 * 2 * 2)
      True
    """
    attn_p, mlp_p = layer_params(config)
    tokens = rows * length
    weights = 2 * tokens * (config.num_layers * (attn_p + mlp_p) + config.hidden_size
                            * config.vocab_size)  # fmt: skip
    types = config.layer_types or ("full_attention",) * config.num_layers
    window = config.sliding_window or length
    keys = [min(window, length) if t == LOCAL_ATTENTION else length for t in types]
    scores = sum(4 * tokens * k * config.num_heads * config.head_dim for k in keys)
    return 3 * (weights + (scores / 2 if causal else scores))


class DecodeCost(NamedTuple):
    """A rollout's work per device: the prefill, then `decode.steps` decode steps.

    Attributes:
      prefill: the prompt forward (shared prompts prefilled once).
      decode: all decode steps together (`decode.steps` of them).
      step_floor: one decode step's cost at the start (weights + the cache read).
    """

    prefill: PhaseCost
    decode: PhaseCost
    step_floor: PhaseCost


def decode_step_batches(
    response_lengths: Sequence[int], stages: Sequence[int] | None = None
) -> np.ndarray:
    """The decode batch of every decode step, as the compacting engine runs them.

    Token 0 of every row comes from the prefill; decode step j = 1, 2, ... samples token j of
    each row in the batch, until the longest completion's last token: max(lengths) - 1 steps.
    A row that samples L tokens is live before step L. The batch is stage i's size
    (`rollout.decode_state.compaction_stages`) while more rows are live than stage i + 1
    holds (`decode_until`), then the live rows move into stage i + 1 (`compact`); finished
    rows still in the batch are computed (masked). Without `stages`: every row, every step.

    Args:
      response_lengths: tokens each completion samples, 1..max_new_tokens (int [B]).
      stages: the compaction stages' batch sizes, decreasing from B; None: (B,).

    Returns:
      int [max(lengths) - 1], the rows computed at each step.

    Example:
      >>> decode_step_batches([2, 2, 5, 5], stages=(4, 2))  # 2 rows finish at step 2
      array([4, 2, 2, 2])
    """
    lengths = np.asarray(response_lengths, np.int64)
    stages = tuple(stages or (len(lengths),))
    stage, batches = 0, []
    for step in range(1, int(lengths.max())):
        live = int(np.sum(lengths > step))
        while stage + 1 < len(stages) and live <= stages[stage + 1]:
            stage += 1
        batches.append(stages[stage])
    return np.asarray(batches, np.int64)


def decode_cost(
    config: ModelConfig,
    rows: int,
    unique_prompts: int,
    prompt_len: int,
    response_len: int,
    split: Split,
    *,
    attention_kernel: bool = False,
    cache_dtype_bytes: int | None = None,
    response_lengths: Sequence[int] | None = None,
    stages: Sequence[int] | None = None,
    kernel_block: int = DEFAULT_BLOCKS.block_slots,
) -> DecodeCost:
    """A rollout of `rows` completions of up to `response_len` tokens after `prompt_len`-token
    prompts (`unique_prompts` of them distinct, the rest copies sharing one prefill), per device.

    The prefill runs the XLA attention over its P-slot cache (the model runs attention kernels
    only in cache-free forwards). Decode step j (`decode_step_batches`) reads the local
    weights once and, for each row in its batch, that row's KV cache: on the XLA path every
    one of the S = P + N - 1 slots (masked); with the decode `attention_kernel` only the
    filled P + j slots, rounded up to the kernel's `kernel_block` (`kernels.decode_attention`;
    the engine pads the cache to whole blocks); its score FLOPs follow the same keys, and a
    local layer's at most its window.

    Args:
      config, rows, unique_prompts, prompt_len, response_len, split: the rollout's shapes.
      attention_kernel: the decode steps run the filled-slot kernel.
      cache_dtype_bytes: bytes per cache element (default: the model dtype's).
      response_lengths: tokens each completion samples (int [rows]); None: every row runs to
        `response_len` (then compaction saves nothing).
      stages: the compaction stages' batch sizes (None: no compaction).
      kernel_block: cache slots per kernel block.
    """
    attn_p, mlp_p = layer_params(config)
    b = _dtype_bytes(config)
    cb = cache_dtype_bytes or b
    n, k, h = config.num_heads, config.num_kv_heads, config.head_dim
    prefill = forward_cost(config, unique_prompts, prompt_len, split)
    slots = prompt_len + response_len - 1
    weights = config.num_layers * (attn_p / split.heads + mlp_p / split.mlp) * b
    unembed = config.hidden_size * config.vocab_size / split.vocab
    per_token_cache = 2 * config.num_layers * k * h * cb / split.heads
    lengths = np.full(rows, response_len) if response_lengths is None else response_lengths
    if len(lengths) != rows:
        raise ValueError(f"response_lengths has {len(lengths)} entries for {rows=}")

    def step(j: int, batch: int) -> PhaseCost:
        rows_local = batch / split.rows
        # The kernel reads the blocks holding the filled P + j slots; XLA every slot.
        read = -(-(prompt_len + j) // kernel_block) * kernel_block if attention_kernel else slots
        keys = _window_keys(config, read, kernel=attention_kernel, causal=False)
        flops = 2 * rows_local * (config.num_layers * (attn_p / split.heads + mlp_p / split.mlp)
                                  + unembed)  # fmt: skip
        flops += float(np.sum(4 * rows_local * keys * n * h)) / split.heads
        cache = rows_local * per_token_cache * float(np.mean(keys))
        return PhaseCost(flops, weights + unembed * b + cache, layers_executed=config.num_layers)

    batches = decode_step_batches(lengths, stages)
    decode = sum(
        (step(j, int(batch)) for j, batch in enumerate(batches, start=1)),
        PhaseCost(0.0, 0.0, steps=0),
    )
    return DecodeCost(prefill, decode, step(1, int(batches[0]) if len(batches) else rows))
