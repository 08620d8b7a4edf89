"""Placement on 8 fake CPU devices: colocated and split (4 + 4) GRPO give the same per-step
metrics, the weight sync between the groups stays on device, and the main job uses one device."""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from flax import nnx

from jaxrl_llm.config import config_for, make_tiny
from jaxrl_llm.metrics import read_metrics
from jaxrl_llm.models import init_model, tiny_config
from jaxrl_llm.rewards import RewardRunner
from jaxrl_llm.roles import Learner, RolloutWorker, make_placement, validate_placement
from jaxrl_llm.runners import TIME_KEYS, train
from jaxrl_llm.sharding import no_host_transfers
from jaxrl_llm.stages import load_config
from jaxrl_llm.training import make_optimizer

TINY = "experiments/configs/grpo_tiny.py"


def _placement(mode, train_mesh, rollout_mesh=(1, 1)):
    return ml_collections.ConfigDict(
        dict(mode=mode, train_mesh=train_mesh, rollout_mesh=rollout_mesh)
    )


def _run(tmp_path, name, placement, steps=3):
    config = load_config(
        TINY,
        {
            "train.num_steps": steps,
            "eval.before": False,
            "eval.after": False,
            "loss.kl_beta": 0.05,  # the reference role runs on the train mesh too
        },
    )
    with config.unlocked():
        config.placement = placement
    workdir = tmp_path / name
    train(config, str(workdir), progress=False)
    return read_metrics(str(workdir))


def test_colocated_and_split_grpo_give_the_same_metrics(tmp_path, text_reward):
    colocated = _run(tmp_path, "colocated", _placement("colocated", (2, 4)))
    split = _run(tmp_path, "split", _placement("split", (2, 2), (1, 4)))
    assert len(colocated) == len(split) == 3
    assert any(abs(r["train/pg_loss"]) > 1e-4 for r in colocated)  # the updates are not zero
    assert colocated[-1]["train/kl_ref"] > 0  # the policy moved away from the reference
    for a, b in zip(colocated, split, strict=True):
        assert a.keys() == b.keys()
        for key in a:
            if key in TIME_KEYS or key.startswith("time/"):
                continue
            np.testing.assert_allclose(b[key], a[key], rtol=1e-4, atol=1e-5, err_msg=key)


def _actor_and_rollout(mode):
    if mode == "colocated":  # FSDP over "data" in training, gathered for decoding
        placement = make_placement(_placement("colocated", (2, 4)))
    else:
        placement = make_placement(_placement("split", (1, 4), (1, 4)))
    policy = init_model(tiny_config(), seed=0)

    class _Tokenizer:
        pad_token_id = 0

        @staticmethod
        def stop_token_ids():
            return [1]

    rollout = RolloutWorker(
        policy, _Tokenizer(), placement.rollout_mesh, max_new_tokens=4, temperature=1.0
    )
    expected = jax.tree.map(np.asarray, nnx.state(policy, nnx.Param))
    actor = Learner(
        policy,
        make_optimizer(learning_rate=1e-3),
        lambda m, b: (jnp.zeros(()), {}),
        placement.train_mesh,
    )
    return placement, actor, rollout, expected


def test_split_weight_sync_moves_device_to_device_only():
    placement, actor, rollout, expected = _actor_and_rollout("split")
    train_devices = set(placement.train_mesh.devices.flat)
    rollout_devices = set(placement.rollout_mesh.devices.flat)
    assert not train_devices & rollout_devices and len(rollout_devices) == 4
    with no_host_transfers():  # any host-to-device (or, off CPU, device-to-host) copy raises
        stats = rollout.sync(actor.params)
    leaves = jax.tree.leaves(rollout.params)
    assert stats.num_moved == len(leaves) and stats.bytes == sum(x.nbytes for x in leaves)
    for x in leaves:
        assert set(x.sharding.device_set) == rollout_devices
    for got, want in zip(leaves, jax.tree.leaves(expected), strict=True):
        np.testing.assert_array_equal(np.asarray(got), want)
    # The guard is live: the same weights sent through the host are refused.
    host = np.asarray(leaves[0])
    with pytest.raises(Exception, match="host-to-device"), no_host_transfers():
        jax.device_put(host, leaves[0].sharding)


def test_colocated_sync_reshards_to_the_decode_layout_on_the_same_devices():
    placement, actor, rollout, expected = _actor_and_rollout("colocated")
    stats = rollout.sync(actor.params)
    assert placement.rollout_mesh is placement.train_mesh
    mlp_train = actor.params["layers"][0]["mlp"]["gate_proj"].get_value()
    mlp_decode = rollout.params["layers"][0]["mlp"]["gate_proj"].get_value()
    assert mlp_train.sharding.device_set == mlp_decode.sharding.device_set
    assert stats.num_moved > 0  # embed gathered over "data" in the decode layout
    np.testing.assert_array_equal(
        np.asarray(mlp_decode), expected["layers"][0]["mlp"]["gate_proj"].get_value()
    )


@pytest.mark.parametrize("mode", ["colocated", "split"])
def test_snapshot_outlives_the_actors_donated_update(mode):
    """The asynchronous runner's weight versions: fresh buffers, on device, never through the
    host, still readable after the actor's step donated its own."""
    placement, actor, rollout, expected = _actor_and_rollout(mode)
    with no_host_transfers():
        snapshot, stats = rollout.snapshot(actor.params)
    leaves = jax.tree.leaves(snapshot)
    assert stats.bytes == sum(x.nbytes for x in leaves) and stats.seconds > 0
    before = jax.tree.leaves(actor.params)
    actor.update({"x": np.zeros((8, 1), np.float32)})
    assert all(x.is_deleted() for x in before)  # the step donated the old parameters
    rollout_devices = set(placement.rollout_mesh.devices.flat)
    for got, want in zip(jax.tree.leaves(snapshot), jax.tree.leaves(expected), strict=True):
        assert not got.is_deleted() and set(got.sharding.device_set) == rollout_devices
        np.testing.assert_array_equal(np.asarray(got), want)


def test_main_job_runs_on_a_one_device_mesh():
    config = config_for("grpo")
    placement = make_placement(config.placement)
    assert placement.colocated and placement.train_mesh.devices.size == 1
    assert placement.train_mesh.axis_names == ("data", "model")


def test_placement_errors_name_the_field():
    with pytest.raises(ValueError, match=r"config.placement.mode='spread'"):
        validate_placement(_placement("spread", (1, 1)))
    with pytest.raises(ValueError, match=r"config.placement.train_mesh=\(0, 1\)"):
        validate_placement(_placement("colocated", (0, 1)))
    with pytest.raises(ValueError, match="needs 16 devices, 8 are available"):
        validate_placement(_placement("split", (2, 4), (2, 4)), num_devices=8)
    config = make_tiny(config_for("grpo"))
    assert config.placement.mode == "colocated"


class _CharTokenizer:
    """One token per character: the reward model tests' texts without a vocabulary."""

    pad_token_id = 0

    @staticmethod
    def batch_encode(texts):
        return [[1 + ord(ch) % 200 for ch in text] for text in texts]


def test_reward_role_adds_a_weighted_reward_model(tmp_path):
    from jaxrl_llm.models import ScalarHeadModel, save_scalar_model
    from jaxrl_llm.roles import ModelReward, RewardRole

    model = ScalarHeadModel(init_model(tiny_config(), seed=0), rngs=nnx.Rngs(1))
    save_scalar_model(model, str(tmp_path / "rm"))
    scorer = ModelReward(model, _CharTokenizer(), batch_size=2, min_length_bucket=8)
    prompts, completions = ["ab", "abc", "x"], ["c", "", "yz"]
    scores = scorer(prompts, completions)
    # Each score is the head at the last real token, whatever the padding of its batch.
    for i, text in enumerate(["abc", "abc", "xyz"]):
        ids = jnp.asarray([_CharTokenizer.batch_encode([text])[0]])
        np.testing.assert_allclose(
            scores[i], model.sequence_scores(ids, jnp.asarray([len(text)]))[0], atol=1e-5
        )
    functions = RewardRunner({"task": lambda p, c, e: 1.0}, timeout_s=None)
    out = RewardRole(functions, scorer, model_weight=0.5)(prompts, completions, [None] * 3)
    np.testing.assert_allclose(out.total, 1.0 + 0.5 * scores, rtol=1e-6)
    np.testing.assert_array_equal(out.per_function["model"], scores)


def test_reward_model_lives_sharded_on_the_train_mesh_as_the_plan_compiles_it():
    """A run's reward model keeps its frozen weights on the train mesh by the train rules and
    splits each batch's rows over "data" (the "reward_model" phase of `jaxrl_llm.plan`); its
    scores equal the unsharded model's."""
    from jaxrl_llm.models import ScalarHeadModel
    from jaxrl_llm.roles import ModelReward

    model = ScalarHeadModel(init_model(tiny_config(), seed=0), rngs=nnx.Rngs(1))
    mesh = make_placement(_placement("colocated", (2, 4))).train_mesh
    sharded = ModelReward(model, _CharTokenizer(), batch_size=4, min_length_bucket=8, mesh=mesh)
    local = ModelReward(model, _CharTokenizer(), batch_size=4, min_length_bucket=8)
    leaves = jax.tree.leaves(sharded.params)
    assert all(set(x.sharding.device_set) == set(mesh.devices.flat) for x in leaves)
    # the embedding [V, D] and the MLP's kernels are split over the 4-way model axis
    assert any(x.addressable_shards[0].data.size * 4 <= x.size for x in leaves)
    prompts, completions = ["ab", "abc", "x", "hello", "q"], ["c", "", "yz", " world", "r"]
    np.testing.assert_allclose(
        sharded(prompts, completions), local(prompts, completions), rtol=1e-5, atol=1e-5
    )


def test_colocated_decode_mesh_of_its_own_shape_on_the_same_devices():
    """HybridFlow's different tensor parallelism per phase: train (2, 4), decode (4, 2) over
    the same 8 devices; the sync reshards between the two meshes on device."""
    placement = make_placement(_placement("colocated", (2, 4), (4, 2)))
    assert placement.colocated and placement.rollout_mesh is not placement.train_mesh
    assert dict(placement.rollout_mesh.shape) == {"data": 4, "model": 2}
    assert set(placement.rollout_mesh.devices.flat) == set(placement.train_mesh.devices.flat)
    # A rollout mesh with another device count keeps the train mesh (the default (1, 1)).
    assert make_placement(_placement("colocated", (2, 4))).rollout_mesh.shape["model"] == 4
    policy = init_model(tiny_config(), seed=0)
    expected = jax.tree.map(np.asarray, nnx.state(policy, nnx.Param))

    class _Tokenizer:
        pad_token_id = 0

        @staticmethod
        def stop_token_ids():
            return [1]

    rollout = RolloutWorker(
        policy, _Tokenizer(), placement.rollout_mesh, max_new_tokens=4, temperature=1.0
    )
    actor = Learner(
        policy, make_optimizer(learning_rate=1e-3), lambda m, b: (jnp.zeros(()), {}),
        placement.train_mesh,
    )  # fmt: skip
    with no_host_transfers():
        rollout.sync(actor.params)
    gate = rollout.params["layers"][0]["mlp"]["gate_proj"].get_value()
    assert gate.sharding.mesh.shape["model"] == 2
    np.testing.assert_array_equal(
        np.asarray(gate), expected["layers"][0]["mlp"]["gate_proj"].get_value()
    )
    out = rollout.sample([[5, 6, 7], [8, 9]], seed=0)
    assert out.tokens.shape[0] == 2


def test_decode_batch_chunks_give_the_same_samples():
    """`rollout.decode_batch`: rows decoded in chunks keep the keys they have in the whole batch,
    so the samples equal one call's; prompts of different buckets are padded to one width."""
    policy = init_model(tiny_config(), seed=0)

    class _Tokenizer:
        pad_token_id = 0

        @staticmethod
        def stop_token_ids():
            return [1]

    mesh = make_placement(_placement("colocated", (1, 1))).rollout_mesh

    def worker(decode_batch):
        w = RolloutWorker(policy, _Tokenizer(), mesh, max_new_tokens=6, temperature=1.0,
                          min_prompt_bucket=4, decode_batch=decode_batch)  # fmt: skip
        w.params = nnx.state(policy, nnx.Param)
        return w

    prompts = [[5, 6, 7], [8, 9], [10] * 7, [11, 12], [13]]  # the third needs a wider bucket
    whole = worker(0).sample(prompts, seed=3)
    chunked_worker = worker(2)
    chunked = chunked_worker.sample(prompts, seed=3)
    assert whole.tokens.shape == chunked.tokens.shape
    for name in ("tokens", "completion_mask", "prompt_lengths", "lengths", "finish_reason"):
        np.testing.assert_array_equal(getattr(chunked, name), getattr(whole, name), err_msg=name)
    # XLA:CPU's matmuls round differently for batches of other sizes: last-bit differences.
    np.testing.assert_allclose(chunked.logprobs, whole.logprobs, atol=1e-5)
    # Work adds up over the chunks (3 programs: 2 + 2 + 1 rows).
    assert int(chunked_worker.last_work.prefill_tokens_plain) > 0
    with pytest.raises(ValueError, match="decode_batch"):
        worker(-1)
