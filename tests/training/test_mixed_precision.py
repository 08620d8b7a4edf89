"""Mixed precision: float32 master weights and Adam moments under bfloat16 compute.

The train step casts inside its program (the loss sees bfloat16, the update lands in float32),
20 AdamW steps at 1e-6 move every master weight, pure bfloat16 at such a rate is refused with
one line, the float32 default compiles the very program it did before, checkpoints and exports
hold the float32 master, and frozen copies (reference, LoRA base, decode copy) are bfloat16.
"""

import json

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from flax import nnx
from safetensors.numpy import load_file

from jaxrl_llm.checkpoint import Checkpointer, abstract_like
from jaxrl_llm.config import config_for, make_tiny, validate_config, validate_precision
from jaxrl_llm.models import ScalarHeadModel, init_model, save_hf, tiny_config
from jaxrl_llm.models import lora as lora_lib
from jaxrl_llm.models.precision import compute_params, merge_for_compute
from jaxrl_llm.models.weights import assign_hf_tensors
from jaxrl_llm.roles import Learner, Reference, RolloutWorker, make_placement
from jaxrl_llm.rollout import GenerationConfig, Generator
from jaxrl_llm.training import make_optimizer, make_train_step, sequence_logprobs
from jaxrl_llm.training import train_step as train_step_lib
from jaxrl_llm.training.optimizer import smallest_kept_update

MIXED = tiny_config(dtype="bfloat16", param_dtype="float32")
TOKENS = np.random.default_rng(0).integers(3, 250, size=(4, 12)).astype(np.int32)


def _mesh():
    return make_placement(
        ml_collections.ConfigDict(dict(mode="colocated", train_mesh=(1, 1), rollout_mesh=(1, 1)))
    ).train_mesh


def _xent(model, batch):
    logp_bt, _ = sequence_logprobs(model, batch["tokens"])
    return -jnp.mean(logp_bt[:, 1:]), {}


def _floats(tree):
    return [x for x in jax.tree.leaves(tree) if jnp.issubdtype(x.dtype, jnp.floating)]


def _changed_fraction(before, after) -> float:
    pairs = zip(jax.tree.leaves(before), jax.tree.leaves(after), strict=True)
    changed = sum(int(np.sum(np.asarray(a) != np.asarray(b))) for a, b in pairs)
    return changed / sum(np.size(x) for x in jax.tree.leaves(before))


def test_model_config_stores_in_param_dtype_and_casts_only_transformer_weights():
    assert tiny_config(param_dtype="float32").param_dtype is None  # same as dtype: one spelling
    assert MIXED.mixed_precision and MIXED.jnp_param_dtype == jnp.float32
    with pytest.raises(ValueError, match="param_dtype='bfloat16' is narrower than dtype"):
        tiny_config(param_dtype="bfloat16")
    model = init_model(MIXED, seed=0)
    params = nnx.state(model, nnx.Param)
    assert {x.dtype for x in jax.tree.leaves(params)} == {jnp.dtype(jnp.float32)}
    cast = compute_params(model, params)
    assert {x.dtype for x in jax.tree.leaves(cast)} == {jnp.dtype(jnp.bfloat16)}
    np.testing.assert_array_equal(  # exactly the rounded master
        np.asarray(cast["embed"].get_value(), np.float32),
        np.asarray(params["embed"].get_value().astype(jnp.bfloat16), np.float32),
    )
    assert cast["embed"].get_metadata()["logical_axes"] == ("vocab", "embed")
    # a scalar head keeps its float32 head; only the trunk computes in bfloat16
    critic = ScalarHeadModel.from_policy(model)
    cast = compute_params(critic, nnx.state(critic, nnx.Param))
    assert cast["head"].get_value().dtype == jnp.float32
    assert cast["trunk"]["embed"].get_value().dtype == jnp.bfloat16
    # nothing to cast: the very same state comes back
    plain = nnx.state(init_model(tiny_config(), seed=0), nnx.Param)
    assert compute_params(init_model(tiny_config(), seed=0), plain) is plain


def test_twenty_adamw_steps_at_1e6_move_every_float32_master_weight():
    seen = []

    def loss(model, batch):
        seen.append(model.embed[...].dtype)  # at trace time: what the program computes with
        return _xent(model, batch)

    actor = Learner(init_model(MIXED, seed=0), make_optimizer(learning_rate=1e-6), loss, _mesh())
    assert {x.dtype for x in _floats(actor.state)} == {jnp.dtype(jnp.float32)}  # + Adam moments
    before = jax.tree.map(np.asarray, actor.state.params)
    for _ in range(20):
        metrics = actor.update({"tokens": TOKENS})
    assert seen == [jnp.bfloat16] and float(metrics["nonfinite"]) == 0.0
    assert _changed_fraction(before, actor.state.params) == 1.0  # every element of every weight
    delta = max(
        float(np.abs(np.asarray(b) - a).max())
        for a, b in zip(jax.tree.leaves(before), jax.tree.leaves(actor.state.params), strict=True)
    )
    # Adam moves a weight about lr per step: 20 steps stay below one bfloat16 step of a weight
    # of 0.02 (1.2e-4), so only the float32 master can hold them.
    assert delta < 1.5 * 20 * 1e-6 < 2 * smallest_kept_update("bfloat16", 0.02)

    # The same 20 steps on the bfloat16 weights themselves lose nearly every update.
    pure = init_model(tiny_config(dtype="bfloat16"), seed=0)
    optimizer = make_optimizer(learning_rate=1e-6)
    graphdef, params = nnx.split(pure, nnx.Param)
    state = train_step_lib.TrainState(jnp.zeros((), jnp.int32), params, optimizer.init(params))
    step = make_train_step(graphdef, optimizer, _xent, donate=False)
    for _ in range(20):
        state, _ = step(state, {"tokens": jnp.asarray(TOKENS)})
    assert _changed_fraction(params, state.params) < 0.05


def test_pure_bfloat16_below_its_rounding_step_is_refused_in_one_line():
    assert smallest_kept_update("bfloat16", 0.02) == 2.0**-14  # half of 0.02's step 2^-13
    config = make_tiny(config_for("grpo"))
    with config.unlocked():
        config.model.dtype = config.model.param_dtype = "bfloat16"
        config.optimizer.learning_rate = 1e-6
    with pytest.raises(ValueError) as error:
        validate_config(config)
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith(
        "config.model.param_dtype='bfloat16' cannot train at config.optimizer.learning_rate=1e-06"
    )
    assert "set config.model.param_dtype='float32'" in message and "6.1e-05" in message
    with config.unlocked():
        config.optimizer.learning_rate = 1e-4  # above the step: pure bfloat16 is allowed
    validate_precision(config)
    with config.unlocked():
        config.optimizer.learning_rate = 1e-6
        config.model.param_dtype = "float32"  # the fix: a float32 master
    validate_precision(config)
    ppo = make_tiny(config_for("ppo"))  # the critic's own rate is checked too
    with ppo.unlocked():
        ppo.model.dtype = ppo.model.param_dtype = "bfloat16"
        ppo.optimizer.learning_rate = 1e-3
        ppo.critic.learning_rate = 1e-6
    with pytest.raises(ValueError, match=r"config\.critic\.learning_rate=1e-06"):
        validate_precision(ppo)


def test_every_stage_is_checked():
    from jaxrl_llm.stages import validate_stage
    from jaxrl_llm.stages.sft import sft_config

    config = sft_config()
    with config.unlocked():
        config.model.dtype = config.model.param_dtype = "bfloat16"
        config.optimizer.learning_rate = 1e-6
    with pytest.raises(ValueError, match=r"param_dtype='bfloat16' cannot train"):
        validate_stage(config)


def test_pod_config_is_bfloat16_compute_with_a_float32_master():
    import os

    from jaxrl_llm.config_files import config_from_file

    config = config_from_file(
        os.path.join(
            os.path.dirname(__file__), "..", "..", "experiments", "configs", "grpo_llama8b_pod.py"
        )
    )
    assert (config.model.dtype, config.model.param_dtype) == ("bfloat16", "float32")
    validate_precision(config)  # its 1e-6 is fine with a float32 master


def test_default_float32_step_is_the_program_it_was(monkeypatch):
    """merge_for_compute adds nothing without mixed precision: the lowered train step is the
    one `nnx.merge` gives, and its updates are bit for bit the same."""
    default = make_tiny(config_for("grpo"))
    assert default.model.param_dtype == "float32" == default.model.dtype

    def run():
        model = init_model(tiny_config(), seed=0)
        optimizer = make_optimizer(learning_rate=1e-3)
        graphdef, params = nnx.split(model, nnx.Param)
        state = train_step_lib.TrainState(jnp.zeros((), jnp.int32), params, optimizer.init(params))
        step = make_train_step(graphdef, optimizer, _xent)
        text = step.lower(state, {"tokens": jnp.asarray(TOKENS)}).as_text()
        for _ in range(3):
            state, _ = step(state, {"tokens": jnp.asarray(TOKENS)})
        return text, jax.tree.map(np.asarray, state)

    text, state = run()
    monkeypatch.setattr(train_step_lib, "merge_for_compute", nnx.merge)  # the code before
    old_text, old_state = run()
    assert text == old_text and "bf16" not in text
    jax.tree.map(np.testing.assert_array_equal, state, old_state)


def test_checkpoint_and_export_hold_the_float32_master(tmp_path):
    actor = Learner(init_model(MIXED, seed=0), make_optimizer(learning_rate=1e-3), _xent, _mesh())
    actor.update({"tokens": TOKENS})
    want = jax.tree.map(np.asarray, actor.state)
    checkpointer = Checkpointer(str(tmp_path / "ckpt"))
    checkpointer.save(1, actor.state, {"step": 1})
    checkpointer.close()
    reader = Checkpointer(str(tmp_path / "ckpt"))
    state, _ = reader.restore(1, abstract_like(actor.state))
    reader.close()
    assert {x.dtype for x in _floats(state)} == {jnp.dtype(jnp.float32)}
    jax.tree.map(np.testing.assert_array_equal, jax.tree.map(np.asarray, state), want)

    # A stage's exported policy (`save_hf`) holds the master too; read back mixed, it is exact.
    model = init_model(MIXED, seed=0)
    nnx.update(model, actor.params)
    save_hf(model, None, str(tmp_path / "hf"))
    with open(tmp_path / "hf" / "config.json") as f:
        assert json.load(f)["torch_dtype"] == "float32"
    tensors = load_file(str(tmp_path / "hf" / "model.safetensors"))
    assert {v.dtype for v in tensors.values()} == {np.dtype(np.float32)}
    loaded = assign_hf_tensors(nnx.eval_shape(lambda: init_model(MIXED)), tensors, source="hf")
    for got, expected in zip(
        jax.tree.leaves(nnx.state(loaded, nnx.Param)), jax.tree.leaves(want.params), strict=True
    ):
        np.testing.assert_array_equal(np.asarray(got), expected)


class _Tokenizer:
    pad_token_id = 0

    @staticmethod
    def stop_token_ids():
        return [1]


def test_frozen_copies_are_bfloat16_and_decoding_the_master_casts_once():
    model = init_model(MIXED, seed=0)
    master = nnx.state(model, nnx.Param)
    reference = Reference(model, _mesh(), temperature=1.0)
    assert {x.dtype for x in jax.tree.leaves(reference.params)} == {jnp.dtype(jnp.bfloat16)}
    rollout = RolloutWorker(model, _Tokenizer(), _mesh(), max_new_tokens=4, temperature=1.0)
    rollout.sync(master)
    assert {x.dtype for x in jax.tree.leaves(rollout.params)} == {jnp.dtype(jnp.bfloat16)}
    # The engine casts a master copy inside its program: the same samples as the decode copy.
    generator = Generator(model, GenerationConfig(max_new_tokens=4, temperature=1.0))
    from_master = generator([[5, 6, 7], [8, 9]], seed=3, params=master)
    from_copy = generator([[5, 6, 7], [8, 9]], seed=3, params=compute_params(model, master))
    np.testing.assert_array_equal(from_master.tokens, from_copy.tokens)
    np.testing.assert_array_equal(from_master.logprobs, from_copy.logprobs)
    # and the forward of merge_for_compute is the bfloat16 model's
    graphdef = nnx.graphdef(model)
    logits = jax.jit(lambda p: merge_for_compute(graphdef, p)(jnp.asarray(TOKENS)))(master)
    assert logits.dtype == jnp.bfloat16


def test_lora_trains_float32_adapters_on_a_bfloat16_base():
    model = lora_lib.add_adapters(init_model(MIXED, seed=0), lora_lib.LoraConfig(rank=4))
    actor = Learner(model, make_optimizer(learning_rate=1e-6), _xent, _mesh())
    assert {x.dtype for x in jax.tree.leaves(actor.frozen)} == {jnp.dtype(jnp.bfloat16)}
    assert {x.dtype for x in _floats(actor.state)} == {jnp.dtype(jnp.float32)}
    base = jax.tree.map(np.asarray, actor.frozen)
    before = jax.tree.map(np.asarray, actor.state.params)
    for _ in range(20):
        actor.update({"tokens": TOKENS})
    assert _changed_fraction(before, actor.state.params) == 1.0
    jax.tree.map(np.testing.assert_array_equal, base, jax.tree.map(np.asarray, actor.frozen))
    rollout = RolloutWorker(
        model, _Tokenizer(), _mesh(), max_new_tokens=4, temperature=1.0, lora_rollout="apply"
    )
    rollout.sync(actor.params)
    assert {x.dtype for x in jax.tree.leaves(rollout.params)} == {jnp.dtype(jnp.bfloat16)}
