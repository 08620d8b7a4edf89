"""The roofline's arithmetic on hand-made numbers, and the FLOP count against XLA's own on
programs without loops (where `cost_analysis()` counts everything once)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jaxrl_llm.models import ModelConfig, init_model
from jaxrl_llm.rollout import GenerationConfig, Generator
from jaxrl_llm.scale import Chip, PhaseCost, costs, roofline
from jaxrl_llm.training.logprobs import sequence_logprobs

CHIP = Chip("test", "test", peak_flops=1e12, hbm_bytes=1e9, hbm_bandwidth=1e11,
            ici_bandwidth=4e10, ici_ports=4, step_overhead_s=1e-3)  # fmt: skip
# One layer (no layer scan), a vocabulary the matmuls dominate.
CONFIG = ModelConfig(vocab_size=1024, hidden_size=256, intermediate_size=1024, num_layers=1,
                     num_heads=4, num_kv_heads=2, tie_word_embeddings=True)  # fmt: skip


def test_roofline_takes_the_largest_term_and_adds_the_layer_overhead():
    line = roofline(PhaseCost(2e12, 1e11, 0.5, layers_executed=3), CHIP)
    assert line.compute_s == pytest.approx(2.0) and line.memory_s == pytest.approx(1.0)
    assert line.comm_s == 0.5 and line.bound == "compute"
    assert line.overhead_s == pytest.approx(3e-3)
    assert line.seconds == pytest.approx(2.003)
    assert roofline(PhaseCost(1e9, 1e12, 0.0), CHIP).bound == "memory"


def test_collective_bandwidth_counts_the_torus_dimensions_spanned():
    assert CHIP.ici_port_bandwidth == 1e10
    assert CHIP.collective_bandwidth(2) == 2e10
    assert CHIP.collective_bandwidth(0) == 1e10  # at least one dimension


def test_split_replicates_what_does_not_divide():
    qwen_like = CONFIG.replace(num_heads=28, num_kv_heads=4, intermediate_size=1004)
    split = costs.split_of(qwen_like, rows=6, data=4, model=8, fsdp=True)
    assert split.heads == 1  # 28 heads do not divide over 8
    assert split.mlp == 1 and split.vocab == 8 and split.rows == 1 and split.weights_fsdp == 4


def _compiler_flops(fn, *args) -> float:
    costs_ = jax.jit(fn).lower(*args).compile().cost_analysis()
    return float((costs_[0] if isinstance(costs_, list) else costs_)["flops"])


def test_forward_flops_match_xla():
    model = init_model(CONFIG)
    graphdef, state = nnx.split(model)
    tokens = jnp.zeros((4, 64), jnp.int32)
    xla = _compiler_flops(lambda s, t: nnx.merge(graphdef, s)(t), state, tokens)
    ours = costs.forward_cost(CONFIG, 4, 64, costs.split_of(CONFIG, 4, 1, 1, fsdp=False)).flops
    assert ours == pytest.approx(xla, rel=0.02)


def test_train_step_flops_match_xla():
    """Forward, backward (activations and weights) and the naive log-prob head's three matmuls;
    the optimizer's elementwise work is left out on both sides."""
    model = init_model(CONFIG)
    graphdef, state = nnx.split(model)
    tokens = jnp.zeros((4, 64), jnp.int32)

    def loss(s, t):
        logp, _ = sequence_logprobs(nnx.merge(graphdef, s), t, implementation="naive")
        return logp.sum()

    xla = _compiler_flops(jax.grad(loss), state, tokens)
    ours = costs.train_step_cost(
        CONFIG, 4, 64, costs.split_of(CONFIG, 4, 1, 1, fsdp=False), remat="none",
        logprob_implementation="naive", trained_params=0,
    ).flops  # fmt: skip
    assert ours == pytest.approx(xla, rel=0.02)


def test_decode_reads_the_whole_cache_without_a_kernel_and_the_filled_blocks_with_one():
    """64-token prompts, 65 new tokens: 64 decode steps over a 128-slot cache. XLA reads all
    128 slots at every step; the kernel (32-slot blocks) the blocks holding the 64 + j filled
    slots: 96 slots at steps 1-32, 128 at steps 33-64."""
    split = costs.split_of(CONFIG, 8, 1, 1, fsdp=False)
    shapes = dict(prompt_len=64, response_len=65, split=split)
    plain = costs.decode_cost(CONFIG, 8, 2, **shapes)
    kernel = costs.decode_cost(CONFIG, 8, 2, **shapes, attention_kernel=True, kernel_block=32)
    assert plain.decode.steps == kernel.decode.steps == 64
    cache_per_token = 2 * CONFIG.num_layers * CONFIG.num_kv_heads * CONFIG.head_dim * 4
    weights = sum(costs.layer_params(CONFIG)) * 4 + CONFIG.hidden_size * CONFIG.vocab_size * 4
    assert plain.step_floor.hbm_bytes == pytest.approx(weights + 8 * 128 * cache_per_token)
    assert kernel.step_floor.hbm_bytes == pytest.approx(weights + 8 * 96 * cache_per_token)
    assert plain.decode.hbm_bytes == pytest.approx(64 * weights + 8 * 64 * 128 * cache_per_token)
    saved = plain.decode.hbm_bytes - kernel.decode.hbm_bytes
    assert saved == pytest.approx(8 * (64 * 128 - (32 * 96 + 32 * 128)) * cache_per_token)
    # The score FLOPs follow the keys read: 4 N H per key and row.
    score = 4 * CONFIG.num_heads * CONFIG.head_dim
    assert plain.decode.flops - kernel.decode.flops == pytest.approx(
        saved / cache_per_token * score
    )


def test_compaction_stages_shrink_the_decode_batch_as_rows_finish():
    """Six rows of 2 tokens and two of 5, stages 8 / 4 / 2: step 1 decodes all 8 rows; before
    step 2 two rows are live, so the batch drops to 2 (4 would still hold them) for steps 2-4:
    14 row-steps against 32 without compaction, and the weights read at each of the 4 steps."""
    lengths = [2] * 6 + [5] * 2
    np.testing.assert_array_equal(costs.decode_step_batches(lengths, (8, 4, 2)), [8, 2, 2, 2])
    np.testing.assert_array_equal(costs.decode_step_batches(lengths), [8, 8, 8, 8])
    split = costs.split_of(CONFIG, 8, 1, 1, fsdp=False)
    shapes = dict(prompt_len=16, response_len=5, split=split, response_lengths=lengths)
    compacted = costs.decode_cost(CONFIG, 8, 8, **shapes, stages=(8, 4, 2))
    dense = costs.decode_cost(CONFIG, 8, 8, **shapes)
    cache_per_token = 2 * CONFIG.num_layers * CONFIG.num_kv_heads * CONFIG.head_dim * 4
    weights = sum(costs.layer_params(CONFIG)) * 4 + CONFIG.hidden_size * CONFIG.vocab_size * 4
    slots = 16 + 5 - 1
    assert compacted.decode.steps == dense.decode.steps == 4
    assert compacted.decode.hbm_bytes == pytest.approx(4 * weights + 14 * slots * cache_per_token)
    assert dense.decode.hbm_bytes == pytest.approx(4 * weights + 32 * slots * cache_per_token)
    per_row_step = (dense.decode.flops - compacted.decode.flops) / (32 - 14)
    assert compacted.decode.flops == pytest.approx(14 * per_row_step)


def test_decode_batches_counted_as_the_engine_decodes():
    """The compacting engine's own count of decode row-steps (`DecodeWork`) for rows that end
    at random EOS tokens equals the cost model's, from the same lengths and stages."""
    model = init_model(ModelConfig(vocab_size=16, hidden_size=32, intermediate_size=64,
                                   num_layers=1, num_heads=2, num_kv_heads=1))  # fmt: skip
    rng = np.random.default_rng(0)
    prompts = [rng.integers(1, 16, 5).tolist() for _ in range(16)]
    config = GenerationConfig(max_new_tokens=24, temperature=1.0, eos_ids=(3,),
                              min_compact_batch=2)  # fmt: skip
    generator = Generator(model, config)
    rollout, work = generator.generate_with_work(prompts, seed=1)
    lengths = np.asarray(rollout.lengths)
    assert len(set(lengths.tolist())) > 4  # rows of many lengths
    stages = generator.program_options(16, copies_rows=False).stages
    batches = costs.decode_step_batches(lengths, stages)
    assert len(stages) == 4 and batches.min() < 16  # the batch did shrink
    assert int(work.decode_row_steps) == batches.sum()
    assert int(work.decode_steps) == len(batches)


def test_scalar_head_phases_have_no_unembedding():
    """The critic's value forward and train step, and a reward model's forward: a [D] head on
    the trunk, counted against XLA's own FLOPs (the [D, V] unembedding counted before made the
    critic's forward 1.25x what XLA computes for this config, and 1.26x for SmolLM2-135M)."""
    from jaxrl_llm.models.heads import ScalarHeadModel

    critic = ScalarHeadModel(init_model(CONFIG), rngs=nnx.Rngs(0))
    graphdef, state = nnx.split(critic)
    tokens = jnp.zeros((4, 64), jnp.int32)
    split = costs.split_of(CONFIG, 4, 1, 1, fsdp=False)
    xla = _compiler_flops(lambda s, t: nnx.merge(graphdef, s).token_scores(t), state, tokens)
    ours = costs.forward_cost(CONFIG, 4, 64, split, scalar_head=True).flops
    assert ours == pytest.approx(xla, rel=0.02)
    assert costs.forward_cost(CONFIG, 4, 64, split).flops > 1.2 * xla  # the LM head's count

    def loss(s, t):
        return nnx.merge(graphdef, s).token_scores(t).sum()

    xla_train = _compiler_flops(jax.grad(loss), state, tokens)
    ours_train = costs.train_step_cost(
        CONFIG, 4, 64, split, remat="none", trained_params=0, scalar_head=True
    ).flops
    assert ours_train == pytest.approx(xla_train, rel=0.03)


def test_useful_flops_count_as_maxtext_does():
    """`model_flops` (the MFU anchor's useful work) against three counts it must agree with:
    MaxText's formula written out for Llama-3.1-8B; MaxText's published 8B figure (45.46% MFU
    at 7,207 tokens/s/device on v6e's 918 TFLOP/s, which counted attention over the whole
    square); and XLA's own count of a loop-free train step without remat on an untied model,
    where 6 N per token (the anchor's count before) also counts the input embedding table."""
    from jaxrl_llm.models.architectures import architecture

    llama = architecture("llama-3.1-8b")
    d, f, v, s, layers = 4096, 14336, 128256, 8192, 32
    n, k, h = 32, 8, 128
    weights = 2 * s * (layers * (d * (n + 2 * k) * h + n * h * d + 3 * d * f) + d * v)
    attention = layers * 4 * s * s * n * h
    assert costs.model_flops(llama, 1, s) == pytest.approx(3 * (weights + attention / 2))
    assert costs.model_flops(llama, 1, s, causal=False) == pytest.approx(3 * (weights + attention))
    published = 7207 * costs.model_flops(llama, 1, s, causal=False) / s / 918e12
    assert published == pytest.approx(0.4546, abs=0.001)

    untied = CONFIG.replace(tie_word_embeddings=False)
    graphdef, state = nnx.split(init_model(untied))
    tokens = jnp.zeros((4, 64), jnp.int32)

    def loss(s_, t):
        logp, _ = sequence_logprobs(nnx.merge(graphdef, s_), t, implementation="naive")
        return logp.sum()

    xla = _compiler_flops(jax.grad(loss), state, tokens)  # XLA's attention: the whole square
    ours = costs.model_flops(untied, 4, 64, causal=False)
    assert ours == pytest.approx(xla, rel=0.03)
    six_n = 6 * untied.num_params() * 4 * 64 + 3 * layers_attention(untied, 4, 64)
    assert six_n > 1.1 * xla  # the embedding table counted as a matmul


def layers_attention(config, rows, length):
    """QK^T and PV of every layer over the whole square, one forward."""
    return config.num_layers * 4 * rows * length * length * config.num_heads * config.head_dim
