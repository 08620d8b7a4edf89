"""LoRA adapters on a tiny model: on and off, merge and unmerge, the learner trains adapters
alone, the reference reads the frozen base in place, the rollout syncs adapters only (merge and
apply decode alike), Orbax and PEFT round trips, and config errors naming the field."""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from flax import nnx

from jaxrl_llm.checkpoint import Checkpointer, abstract_like
from jaxrl_llm.config import config_for, lora_config_of
from jaxrl_llm.models import init_model, tiny_config
from jaxrl_llm.models import lora as lora_lib
from jaxrl_llm.models.lora_export import load_peft_adapter, save_peft_adapter
from jaxrl_llm.roles import Learner, Reference, RolloutWorker, make_placement
from jaxrl_llm.sharding import no_host_transfers
from jaxrl_llm.training import make_optimizer

TOKENS = jnp.asarray(np.random.default_rng(0).integers(3, 200, size=(2, 9)), jnp.int32)
CONFIG = lora_lib.LoraConfig(rank=4, alpha=8.0)


def _adapted(seed=0, config=CONFIG, **model_fields):
    """(base model, adapted copy with random non-zero B)."""
    base = init_model(tiny_config(**model_fields), seed=0)
    model = lora_lib.add_adapters(
        init_model(tiny_config(**model_fields), seed=0), config, seed=seed
    )
    adapters = nnx.state(model, nnx.LoRAParam)
    key = jax.random.key(seed + 1)
    bumped = jax.tree.map(
        lambda x: x + 0.05 * jax.random.normal(jax.random.fold_in(key, x.size), x.shape), adapters
    )
    nnx.update(model, bumped)
    return base, model


def test_fresh_adapters_start_as_the_base_model():
    base = init_model(tiny_config(), seed=0)
    model = lora_lib.add_adapters(init_model(tiny_config(), seed=0), CONFIG)
    np.testing.assert_array_equal(model(TOKENS), base(TOKENS))  # B = 0
    adapters = nnx.state(model, nnx.LoRAParam)
    # 7 targets x 2 layers x (A, B)
    assert len(jax.tree.leaves(adapters)) == 28
    a = model.layers[0].attention.q_proj_lora.lora_a
    assert a.shape == (64, 4) and float(jnp.abs(a[...]).max()) > 0
    assert a.get_metadata()["logical_axes"] == ("embed", None)
    with pytest.raises(ValueError, match="already has LoRA"):
        lora_lib.add_adapters(model, CONFIG)


def test_adapters_change_the_output_and_strip_restores_the_base():
    base, model = _adapted()
    assert float(jnp.abs(model(TOKENS) - base(TOKENS)).max()) > 1e-3
    stripped = lora_lib.strip_adapters(model)
    assert not lora_lib.has_adapters(stripped) and lora_lib.has_adapters(model)
    np.testing.assert_allclose(stripped(TOKENS), base(TOKENS), atol=1e-6)


def test_the_layer_scan_and_the_kv_cache_see_the_adapters():
    _, model = _adapted()
    scanned = model(TOKENS)
    unrolled = model.logits(model.hidden_states(TOKENS, scan_layers=False)[0])
    np.testing.assert_allclose(unrolled, scanned, atol=1e-5)
    cache = model.init_cache(2, TOKENS.shape[1])
    step_logits = []
    for t in range(TOKENS.shape[1]):  # one token at a time through the decode path
        positions = jnp.full((2, 1), t, jnp.int32)
        hidden, cache = model.hidden_states(
            TOKENS[:, t : t + 1], positions_bt=positions, kv_cache=cache
        )
        step_logits.append(model.logits(hidden))
    np.testing.assert_allclose(jnp.concatenate(step_logits, axis=1), scanned, atol=1e-4)


def test_merge_then_unmerge_is_the_identity():
    _, model = _adapted()
    full = nnx.state(model, nnx.Param)
    scale = lora_lib.adapter_scale(model)
    assert scale == pytest.approx(2.0)
    merged = lora_lib.merged_params(full, scale)
    assert not lora_lib.has_adapters(merged)
    merged_model = lora_lib.strip_adapters(model)
    nnx.update(merged_model, merged)
    np.testing.assert_allclose(merged_model(TOKENS), model(TOKENS), atol=1e-5)
    np.testing.assert_allclose(lora_lib.merged_model(model)(TOKENS), model(TOKENS), atol=1e-5)
    adapters, _ = lora_lib.split_adapters(full)
    restored = lora_lib.unmerged_params(merged, adapters, scale)
    for got, want in zip(jax.tree.leaves(restored), jax.tree.leaves(full), strict=True):
        np.testing.assert_allclose(got, want, atol=1e-6)


def test_dropout_applies_only_under_a_key():
    config = lora_lib.LoraConfig(rank=4, alpha=8.0, dropout=0.5)
    _, model = _adapted(config=config)
    plain = model(TOKENS)
    np.testing.assert_array_equal(model(TOKENS), plain)  # deterministic outside training
    with lora_lib.dropout_key(jax.random.key(0)):
        first = model(TOKENS)
    with lora_lib.dropout_key(jax.random.key(1)):
        second = model(TOKENS)
    assert float(jnp.abs(first - plain).max()) > 1e-4
    assert float(jnp.abs(first - second).max()) > 1e-4


def _mse_loss(model, batch):
    logits = model(batch["tokens"])
    return jnp.mean(jnp.square(logits)), {}


def test_learner_trains_the_adapters_alone_with_optimizer_state_for_them_only():
    _, model = _adapted()
    base_before = jax.tree.map(np.asarray, nnx.state(lora_lib.strip_adapters(model), nnx.Param))
    mesh = make_placement(
        ml_collections.ConfigDict(dict(mode="colocated", train_mesh=(1, 1), rollout_mesh=(1, 1)))
    ).train_mesh
    actor = Learner(model, make_optimizer(learning_rate=1e-2), _mse_loss, mesh)
    adapter_bytes = lora_lib.adapter_bytes(actor.params)
    assert sum(x.nbytes for x in jax.tree.leaves(actor.state.params)) == adapter_bytes
    # AdamW: two moments per trained parameter, nothing for the frozen base
    opt_bytes = sum(x.nbytes for x in jax.tree.leaves(actor.state.opt_state) if x.ndim)
    assert opt_bytes == 2 * adapter_bytes
    before = jax.tree.map(np.asarray, actor.state.params)
    metrics = actor.update({"tokens": np.asarray(TOKENS)})
    assert float(metrics["grad_norm"]) > 0
    changed = [
        not np.allclose(a, np.asarray(b))
        for a, b in zip(jax.tree.leaves(before), jax.tree.leaves(actor.state.params), strict=True)
    ]
    assert all(changed)
    _, base_after = lora_lib.split_adapters(actor.params)
    for got, want in zip(jax.tree.leaves(base_after), jax.tree.leaves(base_before), strict=True):
        np.testing.assert_array_equal(np.asarray(got), want)
    actor.reset(actor.params)  # a LoRA learner restarts from the adapters of a full state
    assert int(actor.state.step) == 0


def test_reference_is_the_base_with_adapters_off_and_shares_its_weights():
    base, model = _adapted()
    mesh = make_placement(
        ml_collections.ConfigDict(dict(mode="colocated", train_mesh=(1, 1), rollout_mesh=(1, 1)))
    ).train_mesh
    actor = Learner(model, make_optimizer(learning_rate=1e-2), _mse_loss, mesh)
    reference = Reference.of_lora_base(actor, model, temperature=1.0)
    assert reference.params is actor.frozen  # no second copy of the weights
    copied = Reference(base, mesh, temperature=1.0)
    np.testing.assert_allclose(reference.logprobs(TOKENS), copied.logprobs(TOKENS), atol=1e-5)
    actor.update({"tokens": np.asarray(TOKENS)})  # the step never donates the frozen base
    np.testing.assert_allclose(reference.logprobs(TOKENS), copied.logprobs(TOKENS), atol=1e-5)


class _Tokenizer:
    pad_token_id = 0

    @staticmethod
    def stop_token_ids():
        return [1]


def _split_roles(mode):
    placement = make_placement(
        ml_collections.ConfigDict(dict(mode="split", train_mesh=(1, 4), rollout_mesh=(1, 4)))
    )
    _, model = _adapted()
    rollout = RolloutWorker(
        model,
        _Tokenizer(),
        placement.rollout_mesh,
        max_new_tokens=5,
        temperature=1.0,
        lora_rollout=mode,
    )
    actor = Learner(model, make_optimizer(learning_rate=1e-2), _mse_loss, placement.train_mesh)
    return placement, actor, rollout


def test_rollout_syncs_the_base_once_then_adapters_only_and_merge_equals_apply():
    samples = {}
    for mode in ("merge", "apply"):
        placement, actor, rollout = _split_roles(mode)
        adapter_bytes = lora_lib.adapter_bytes(actor.params)
        with no_host_transfers():
            first = rollout.sync(actor.params)
            second = rollout.sync(actor.params)
        assert first.bytes > 10 * adapter_bytes  # the base crossed once
        assert second.bytes == adapter_bytes  # then only the adapters
        assert rollout.sync_payload_bytes == adapter_bytes
        rollout_devices = set(placement.rollout_mesh.devices.flat)
        for x in jax.tree.leaves(rollout.params):
            assert set(x.sharding.device_set) == rollout_devices
        assert lora_lib.has_adapters(rollout.params) == (mode == "apply")
        samples[mode] = rollout.sample([[5, 6, 7], [8, 9]], seed=3)
    np.testing.assert_array_equal(samples["merge"].tokens, samples["apply"].tokens)
    np.testing.assert_allclose(samples["merge"].logprobs, samples["apply"].logprobs, atol=1e-4)


@pytest.mark.parametrize("mode", ["merge", "apply"])
def test_snapshot_outlives_the_lora_actors_donated_update(mode):
    placement, actor, rollout = _split_roles(mode)
    expected = jax.tree.map(np.asarray, rollout.snapshot(actor.params)[0])
    snapshot, stats = rollout.snapshot(actor.params)
    actor.update({"tokens": np.asarray(TOKENS)})  # donates the adapters the snapshot came from
    for got, want in zip(jax.tree.leaves(snapshot), jax.tree.leaves(expected), strict=True):
        assert not got.is_deleted()
        np.testing.assert_array_equal(np.asarray(got), want)
    assert stats.bytes > 0


def test_orbax_checkpoint_holds_the_adapters_alone(tmp_path):
    _, model = _adapted(hidden_size=128, intermediate_size=512)  # the base dominates
    mesh = make_placement(
        ml_collections.ConfigDict(dict(mode="colocated", train_mesh=(1, 1), rollout_mesh=(1, 1)))
    ).train_mesh
    actor = Learner(model, make_optimizer(learning_rate=1e-2), _mse_loss, mesh)
    actor.update({"tokens": np.asarray(TOKENS)})
    checkpointer = Checkpointer(str(tmp_path / "ckpt"))
    checkpointer.save(1, {"actor": actor.state}, {"step": 1})
    checkpointer.close()
    saved = sum(f.stat().st_size for f in (tmp_path / "ckpt").rglob("*") if f.is_file())
    base_bytes = sum(x.nbytes for x in jax.tree.leaves(actor.frozen))
    trained_bytes = 3 * lora_lib.adapter_bytes(actor.params)  # adapters + two Adam moments
    assert trained_bytes < base_bytes / 4
    assert saved < trained_bytes + base_bytes / 4  # the base weights are not in it
    want = jax.tree.map(np.asarray, actor.state)
    reader = Checkpointer(str(tmp_path / "ckpt"))
    tree, meta = reader.restore(1, abstract_like({"actor": actor.state}))
    reader.close()
    for got, expected in zip(jax.tree.leaves(tree), jax.tree.leaves(want), strict=True):
        np.testing.assert_array_equal(np.asarray(got), expected)
    assert meta["step"] == 1


def test_peft_adapter_round_trip(tmp_path):
    _, model = _adapted()
    save_peft_adapter(model, str(tmp_path / "adapter"), base_model="tiny")
    loaded = load_peft_adapter(init_model(tiny_config(), seed=0), str(tmp_path / "adapter"))
    np.testing.assert_allclose(loaded(TOKENS), model(TOKENS), atol=1e-6)
    other = init_model(tiny_config(hidden_size=32, num_heads=4, num_kv_heads=2), seed=0)
    with pytest.raises(ValueError, match="lora_A.weight' has shape"):
        load_peft_adapter(other, str(tmp_path / "adapter"))


def test_save_hf_writes_merged_weights(tmp_path):
    from jaxrl_llm.models.hf import load_hf_directory, save_hf
    from tests.models.helpers import write_tiny_tokenizer

    write_tiny_tokenizer(str(tmp_path / "tok"))
    from jaxrl_llm.models import Tokenizer

    tokenizer = Tokenizer.from_hf_directory(str(tmp_path / "tok"))
    _, model = _adapted(vocab_size=tokenizer.vocab_size)  # every token embedded
    save_hf(model, tokenizer, str(tmp_path / "hf"))
    reloaded, _ = load_hf_directory(str(tmp_path / "hf"))
    assert not lora_lib.has_adapters(reloaded)
    np.testing.assert_allclose(reloaded(TOKENS), model(TOKENS), atol=1e-5)


def test_config_errors_name_the_field():
    config = config_for("grpo")
    assert lora_config_of(config) is None  # rank 0: full fine-tuning
    with config.unlocked():
        config.model.lora.rank = 8
        config.model.lora.targets = "q_proj,qkv"
    with pytest.raises(ValueError, match=r"config.model.lora: targets=.*q_proj"):
        lora_config_of(config)
    with config.unlocked():
        config.model.lora.targets = "q_proj"
        config.model.lora.rollout = "fuse"
    with pytest.raises(ValueError, match="config.model.lora.rollout='fuse'"):
        lora_config_of(config)
    with config.unlocked():
        config.model.lora.rollout = "apply"
        config.model.lora.dropout = 1.5
    with pytest.raises(ValueError, match=r"config.model.lora: dropout=1.5"):
        lora_config_of(config)
