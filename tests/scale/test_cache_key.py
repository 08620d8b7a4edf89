"""A compiled program's cache key covers every config field a program reads."""

import jax
import numpy as np
import pytest
from jax.sharding import Mesh

from jaxrl_llm.config import apply_overrides, config_for
from jaxrl_llm.models import ModelConfig
from jaxrl_llm.scale.programs import program_key
from jaxrl_llm.scale.workload import workload_of

MESH = Mesh(np.asarray(jax.devices()[:1]).reshape(1, 1), ("data", "model"))
# a model given by shape, so no GGUF file is read for its vocabulary
MODEL = ModelConfig(vocab_size=256, hidden_size=32, intermediate_size=64, num_layers=2,
                    num_heads=4, num_kv_heads=2)  # fmt: skip


def key_of(overrides) -> str:
    config = apply_overrides(config_for("grpo"), overrides)
    return program_key(workload_of(config, MODEL), "actor_train", MESH)


@pytest.mark.parametrize(
    "field, value",
    [
        # the three the old key left out (issue 43)
        ("rollout.compaction", False),
        ("rollout.prefix_sharing", "none"),
        ("optimizer.learning_rate", 1e-6),
        ("optimizer.b2", 0.95),
        ("optimizer.schedule", "cosine"),
        ("train.num_steps", 50),  # a decaying schedule's length is traced
        ("rollout.temperature", 1.0),
        ("model.dtype", "bfloat16"),
        ("loss.entropy_coef", 0.01),
        ("off_policy.correction", "tis"),
        ("stabilise.overlong", "filter"),
    ],
)
def test_every_traced_field_changes_the_key(field, value):
    assert key_of({field: value}) != key_of({})


@pytest.mark.parametrize(
    "field, value",
    [
        ("seed", 3),
        ("train.checkpoint_every", 7),
        ("eval.every", 5),
        ("task.name", "gcd"),
        ("rollout.decode_batch", 8),  # a chunk enters a key as the program's rows
    ],
)
def test_fields_no_program_reads_leave_the_key(field, value):
    assert key_of({field: value}) == key_of({})
