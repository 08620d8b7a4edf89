"""experiments/benchmarks/time_to_accuracy.py: the race's rules, the report, the peers' recipe,
prompts, reward and weight conversions, and our side and TRL's end to end on the tiny random
model (TRL's skipped without the peers extra; Tunix's needs its own interpreter, not run here)."""

import dataclasses
import importlib.util
import json
import math
import os
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "experiments", "benchmarks", "time_to_accuracy.py")
TINY = os.path.join(ROOT, "experiments", "configs", "grpo_tiny.py")

_spec = importlib.util.spec_from_file_location("time_to_accuracy", SCRIPT)
tta = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = tta  # dataclasses look their module up there
_spec.loader.exec_module(tta)


def _curve(system, points, stopped_by="cap"):
    return tta.Curve(
        system,
        [dict(step=s, wall_s=w, accuracy=a, eval_s=1.0) for s, w, a in points],
        stopped_by,
        peak_rss_gb=1.0,
    )


def test_race_stops_at_target_then_cap_then_steps():
    race = tta.Race(target=0.4, cap_s=600.0, eval_every=5, max_steps=20)
    assert race.stop_reason(0.4, 700.0, 20) == "target"
    assert race.stop_reason(0.39, 600.0, 20) == "cap"
    assert race.stop_reason(0.39, 599.0, 20) == "steps"
    assert race.stop_reason(0.39, 599.0, 19) is None
    assert [s for s in range(1, 21) if race.evaluates_after(s, 10.0)] == [5, 10, 15, 20]
    assert race.evaluates_after(3, 600.0)  # past the cap: the last evaluation
    with pytest.raises(ValueError, match="--target=40"):
        tta.Race(target=40, cap_s=1.0, eval_every=1, max_steps=1)


def test_clock_leaves_out_paused_time():
    ticks = iter([100.0, 103.0, 110.0, 112.0, 115.0])  # start, pause, resume, two reads
    clock = tta.TrainingClock(now=lambda: next(ticks))
    with clock.paused():  # 103 -> 110: 7 s not counted
        pass
    assert clock.elapsed() == 112.0 - 100.0 - 7.0
    assert clock.elapsed() == 8.0


def test_curve_records_the_time_before_its_evaluation():
    ticks = iter([0.0, 42.0, 42.0, 50.0, 60.0])
    clock = tta.TrainingClock(now=lambda: next(ticks))
    curve = tta.Curve("side")
    assert curve.record(5, clock, lambda: 0.25) == 0.25
    assert curve.points[0]["step"] == 5 and curve.points[0]["wall_s"] == 42.0
    assert clock.elapsed() == 60.0 - 8.0  # the evaluation (42 -> 50) is not counted


def test_report_takes_the_ratio_at_the_target_and_at_trls_best_accuracy():
    ours = _curve("jaxrl_llm GRPO", [(0, 10, 0.2), (5, 100, 0.3), (10, 200, 0.4)], "target")
    trl = _curve("TRL GRPOTrainer", [(0, 5, 0.2), (5, 400, 0.3), (10, 800, 0.35)])
    curves = {c.system: c for c in (ours, trl)}
    race = tta.Race(target=0.4, cap_s=800.0, eval_every=5, max_steps=100)
    assert tta.race_level(curves, 0.4) == 0.35  # TRL never reached the target: its best
    assert tta.race_level(curves, 0.3) == 0.3
    lines = tta.report(curves, race)
    assert lines[2] == (
        "| jaxrl_llm GRPO | 10 | target | 20.0% | 40.0% | 40.0% | 200 | 200 | 200 | 3 | 1.0 |"
    )
    assert lines[-2:] == [
        "Time to 40.0% held-out (the target): ratio below 0.25 (ours 200 s; TRL did not reach "
        "it in its 800 s).",
        "Time to 35.0% held-out (TRL's final accuracy): ratio 0.25 (ours 200 s / TRL 800 s).",
    ]
    behind = {c.system: c for c in (_curve("jaxrl_llm GRPO", [(0, 10, 0.2)]), trl)}
    assert tta.report(behind, race)[-1] == (
        "Time to 35.0% held-out (TRL's final accuracy): ratio above 0.01 (TRL 800 s; ours did "
        "not reach it in its 10 s)."
    )


def test_a_collapsing_trl_is_measured_at_its_best_not_its_start():
    ours = _curve("jaxrl_llm GRPO", [(0, 7, 0.09), (5, 340, 0.365)], "target")
    trl = _curve("TRL GRPOTrainer", [(0, 22, 0.09), (5, 261, 0.195), (10, 512, 0.01)])
    curves = {c.system: c for c in (ours, trl)}
    race = tta.Race(target=0.35, cap_s=500.0, eval_every=5, max_steps=100)
    assert tta.race_level(curves, 0.35) == 0.195
    assert tta.report(curves, race)[-1] == (
        "Time to 19.5% held-out (TRL's best, not its final accuracy): ratio 1.30 (ours 340 s / "
        "TRL 261 s)."
    )


def test_plot_writes_a_png(tmp_path):
    curves = {"a": _curve("a", [(0, 6, 0.1), (5, 120, 0.3)])}
    tta.plot(curves, tta.Race(0.3, 60.0, 5, 10), str(tmp_path / "curves.png"))
    with open(tmp_path / "curves.png", "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


PLAIN_CONFIG = tta.DEFAULT_CONFIG + ":plain"  # the main job without its "stable" recipe


def test_trl_arguments_mirror_the_plain_recipe():
    from jaxrl_llm.config import apply_overrides

    race = tta.Race(0.35, 60.0, 5, 30)
    config = tta.race_config(PLAIN_CONFIG, {}, race)
    args = tta.trl_arguments(config, max_steps=30, output_dir="out")
    expected = dict(
        per_device_train_batch_size=32,
        num_generations=4,
        max_completion_length=32,
        temperature=0.7,
        learning_rate=3e-5,
        lr_scheduler_type="constant_with_warmup",
        warmup_steps=2,
        adam_beta2=0.99,
        beta=0.0,
        epsilon=0.2,
        epsilon_high=0.28,
        loss_type="dapo",
        scale_rewards="group",
        max_steps=30,
        shuffle_dataset=False,
    )
    assert {k: args[k] for k in expected} == expected
    apply_overrides(config, {"stabilise.dynamic_sampling": True})
    with pytest.raises(ValueError, match=r"config\.stabilise\.dynamic_sampling .* set it to False"):
        tta.trl_arguments(config, max_steps=30, output_dir="out")


def test_trl_nearest_gives_the_stable_recipe_trls_counterparts():
    from jaxrl_llm.config import apply_overrides

    race = tta.Race(0.35, 60.0, 5, 30)
    config = tta.race_config(tta.DEFAULT_CONFIG, {}, race)  # the main job: "stable"
    with pytest.raises(ValueError, match=r"config\.loss\.entropy_coef .* --trl-nearest"):
        tta.trl_arguments(config, max_steps=30, output_dir="out")
    args = tta.trl_arguments(config, max_steps=30, output_dir="out", nearest=True)
    expected = dict(
        temperature=1.0,
        beta=0.04,
        lr_scheduler_type="cosine",
        warmup_steps=2,
        entropy_coef=0.005,
        use_adaptive_entropy=True,
        entropy_target=0.7,
        entropy_coef_min=0.005,
        entropy_coef_max=0.05,
        entropy_coef_delta=0.005,
    )
    assert {k: args[k] for k in expected} == expected
    # the race's default length is the recipe's, so its cosine decays as in the recipe
    assert tta.recipe_steps(tta.DEFAULT_CONFIG, {}) == 30
    assert tta.recipe_steps(tta.DEFAULT_CONFIG, {"train.num_steps": 12}) == 12
    differences = tta.trl_nearest(config)[1]
    assert len(differences) == 2
    assert differences[0].startswith("dynamic sampling: ours resamples tied groups (at most 3")
    assert "always applied; TRL's +-0.005 a step" in differences[1]
    # no TRL twin, nearest or not: a target as a share of the first entropy, Clip-Cov
    for field, value in [("entropy_target_ratio", 0.5), ("clip_cov_fraction", 0.1)]:
        other = apply_overrides(config.copy_and_resolve_references(), {f"stabilise.{field}": value})
        with pytest.raises(ValueError, match=rf"config\.stabilise\.{field} .* set it to 0"):
            tta.trl_arguments(other, max_steps=30, output_dir="out", nearest=True)
    trl = pytest.importorskip("trl")
    trl.GRPOConfig(**args)  # TRL takes every keyword (its version has them)


def test_peers_get_our_prompts_in_our_order_and_our_reward():
    from jaxrl_llm.rollout.chat import prompt_ids
    from jaxrl_llm.runners.components import build_parts

    config = tta.race_config(TINY, {"train.num_minibatches": 1}, tta.Race(1.0, 60.0, 1, 3))
    parts = build_parts(config)  # what our runner draws from and renders with
    examples, prompts = tta.training_prompts(config, parts.tokenizer, 3)
    assert [e.question for e in examples] == [
        e.question for _ in range(3) for e in next(parts.batcher)
    ]
    assert prompts == prompt_ids(parts.tokenizer, examples)[0]
    score = tta.reward_by_index(config, examples)
    right, wrong = f"So it is {examples[4].answer}.", "So it is 12345."
    assert score(prompts[4:6], [right, wrong], [4, 5]) == [1.0, 0.0]


# The tiny config, one optimizer update a step (TRL's side mirrors no more), and a cap so short
# that each side stops after its first step: a curve of two evaluations, stopped by the cap.
SHORT_RACE = tta.Race(target=1.0, cap_s=1e-3, eval_every=5, max_steps=3)


@pytest.fixture(scope="module")
def tiny_export(tmp_path_factory):
    config = tta.race_config(
        TINY, {"train.num_minibatches": 1, "eval.continuous": False}, SHORT_RACE
    )
    export_dir = str(tmp_path_factory.mktemp("export"))
    tta.export_policy(config, export_dir)
    return config, export_dir


def _assert_stopped_by_the_cap(curve):
    assert [p["step"] for p in curve.points] == [0, 1]
    assert curve.stopped_by == "cap"
    assert 0 < curve.points[0]["wall_s"] < curve.points[1]["wall_s"]
    assert all(0.0 <= p["accuracy"] <= 1.0 and p["eval_s"] > 0 for p in curve.points)


def test_our_side_gives_a_curve(tiny_export, tmp_path):
    config, export_dir = tiny_export
    curve = tta.run_ours(config, export_dir, SHORT_RACE, str(tmp_path))
    _assert_stopped_by_the_cap(curve)
    assert curve.compilation_cache == "off"  # every compile counts unless a cache is given


def test_our_side_says_whether_its_compilation_cache_was_warm(tiny_export, tmp_path):
    import jax

    keys = ("jax_enable_compilation_cache", "jax_compilation_cache_dir")
    saved = {key: getattr(jax.config, key) for key in keys}
    (tmp_path / "xla").mkdir()
    (tmp_path / "xla" / "entry").write_bytes(b"x")  # as an earlier run leaves it
    try:
        config, export_dir = tiny_export
        curve = tta.run_ours(
            config, export_dir, SHORT_RACE, str(tmp_path), cache_dir=str(tmp_path / "xla")
        )
    finally:
        for key, value in saved.items():
            jax.config.update(key, value)
    assert curve.compilation_cache == "warm"


def test_trl_side_gives_a_curve(tiny_export, tmp_path):
    pytest.importorskip("trl")
    config, export_dir = tiny_export
    _assert_stopped_by_the_cap(tta.run_trl(config, export_dir, SHORT_RACE, str(tmp_path)))


def test_trl_weights_read_back_into_our_model(tiny_export):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from jaxrl_llm.models.hf import load_hf_directory

    _, export_dir = tiny_export
    policy = transformers.AutoModelForCausalLM.from_pretrained(export_dir, dtype=torch.float32)
    with torch.no_grad():  # weights the export does not hold, as after TRL's updates
        for parameter in policy.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    model, _ = load_hf_directory(export_dir)
    tta.copy_torch_weights(policy, model)
    tokens = np.array([[1, 9690, 198, 57, 1242, 2]], np.int32)
    with torch.no_grad():
        expected = policy(torch.from_numpy(tokens).long()).logits.numpy()
    np.testing.assert_allclose(np.asarray(model(tokens)), expected, atol=1e-4, rtol=1e-4)


@pytest.fixture
def tunix_side():
    """time_to_accuracy_tunix.py; its `from time_to_accuracy import ...` finds `tta`."""
    path = os.path.join(os.path.dirname(SCRIPT), "time_to_accuracy_tunix.py")
    spec = importlib.util.spec_from_file_location("time_to_accuracy_tunix", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_tunix_weights_go_back_to_hugging_face_names(tunix_side):
    d, n, k, h, f, v = 8, 2, 1, 4, 16, 10
    rng = np.random.default_rng(0)
    hf = {
        "model.embed_tokens.weight": rng.normal(size=(v, d)),
        "model.norm.weight": rng.normal(size=(d,)),
        "model.layers.0.self_attn.q_proj.weight": rng.normal(size=(n * h, d)),
        "model.layers.0.self_attn.k_proj.weight": rng.normal(size=(k * h, d)),
        "model.layers.0.self_attn.v_proj.weight": rng.normal(size=(k * h, d)),
        "model.layers.0.self_attn.o_proj.weight": rng.normal(size=(d, n * h)),
        "model.layers.0.mlp.gate_proj.weight": rng.normal(size=(f, d)),
        "model.layers.0.mlp.up_proj.weight": rng.normal(size=(f, d)),
        "model.layers.0.mlp.down_proj.weight": rng.normal(size=(d, f)),
        "model.layers.0.input_layernorm.weight": rng.normal(size=(d,)),
        "model.layers.0.post_attention_layernorm.weight": rng.normal(size=(d,)),
    }
    layer = "model.layers.0."
    # Tunix's loader (tunix.models.llama3.params): transpose, then split the heads
    state = {
        "embedder": {"input_embedding": hf["model.embed_tokens.weight"]},
        "final_norm": {"w": hf["model.norm.weight"]},
        "layers": {
            0: {
                "attn": {
                    "q_proj": {"w": hf[layer + "self_attn.q_proj.weight"].T.reshape(d, n, h)},
                    "k_proj": {"w": hf[layer + "self_attn.k_proj.weight"].T.reshape(d, k, h)},
                    "v_proj": {"w": hf[layer + "self_attn.v_proj.weight"].T.reshape(d, k, h)},
                    "o_proj": {"w": hf[layer + "self_attn.o_proj.weight"].T.reshape(n, h, d)},
                },
                "mlp": {
                    name: {"kernel": hf[f"{layer}mlp.{name}.weight"].T}
                    for name in ("gate_proj", "up_proj", "down_proj")
                },
                "input_layernorm": {"w": hf[layer + "input_layernorm.weight"]},
                "post_attention_layernorm": {"w": hf[layer + "post_attention_layernorm.weight"]},
            }
        },
    }
    back = tunix_side.tunix_hf_tensors(state)
    assert sorted(back) == sorted(hf)
    for name, value in hf.items():
        np.testing.assert_array_equal(back[name], value, err_msg=name)


def test_tunix_recipe_mirrors_ours_and_refuses_a_reference(tunix_side):
    from jaxrl_llm.config import apply_overrides

    race = tta.Race(0.25, 60.0, 5, 30)
    config = tta.race_config(PLAIN_CONFIG, {}, race)
    recipe = tunix_side.tunix_recipe(config, race)
    assert {k: recipe[k] for k in ("prompts", "group", "epsilon_high", "loss_agg_mode")} == {
        "prompts": 8,
        "group": 4,
        "epsilon_high": 0.28,
        "loss_agg_mode": "token-mean",
    }
    assert (recipe["learning_rate"], recipe["warmup_steps"], recipe["eval_every"]) == (3e-5, 2, 5)
    apply_overrides(config, {"loss.kl_beta": 0.04})
    with pytest.raises(ValueError, match=r"config\.loss\.kl_beta .* set it to 0"):
        tunix_side.tunix_recipe(config, race)


def _seeds_module():
    path = os.path.join(ROOT, "experiments", "benchmarks", "time_to_accuracy_seeds.py")
    spec = importlib.util.spec_from_file_location("time_to_accuracy_seeds", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_seeds_ratio_is_a_geometric_mean_with_a_t_interval(tmp_path, capsys):
    seeds = _seeds_module()
    ours, trl = tta.SYSTEMS["ours"], tta.SYSTEMS["trl"]
    races = []
    # ours reaches 20% at 50 / 100 / 200 s, TRL at 100 s each time: ratios 0.5, 1, 2
    for i, ours_s in enumerate((50.0, 100.0, 200.0)):
        curves = {
            ours: _curve(ours, [(0, 10.0, 0.05), (5, ours_s, 0.20)]),
            trl: _curve(trl, [(0, 12.0, 0.05), (5, 100.0, 0.25)]),
        }
        path = tmp_path / f"race{i}.json"
        path.write_text(json.dumps({k: dataclasses.asdict(c) for k, c in curves.items()}))
        races.append(str(path))
    assert seeds.race_ratio(seeds.load_race(races[0]), 0.2) == (0.5, "")
    mean, low, high = seeds.geometric_interval([0.5, 1.0, 2.0])
    assert mean == pytest.approx(1.0)
    # logs -0.693, 0, 0.693: sd 0.693, t(0.975, 2) = 4.303, half-width 4.303 * 0.693 / sqrt(3)
    assert low == pytest.approx(math.exp(-4.303 * math.log(2) / math.sqrt(3)), rel=1e-3)
    assert high == pytest.approx(1 / low)
    assert seeds.race_ratio(seeds.load_race(races[0]), 0.3)[1] == (
        "ours and TRL did not reach 30.0%"
    )
    assert seeds.main(["--level", "0.2", *races]) == 0
    out = capsys.readouterr().out
    assert "time to the level, geometric mean over 3 races: 1.00 [" in out
    # seconds a step from step 0 to the last: ours (ours_s - 10) / 5, TRL's 88 / 5
    assert seeds.race_step_ratio(seeds.load_race(races[0])) == pytest.approx(40.0 / 88.0)
    assert "seconds a step, geometric mean over 3 races:" in out
    assert seeds.main(["--level", "0.3", *races]) == 1
    # a warm-cache run of our side alone (--skip-trl) races the TRL side of the first run
    warm = tmp_path / "warm.json"
    warm.write_text(json.dumps({ours: dataclasses.asdict(_curve(ours, [(5, 25.0, 0.2)]))}))
    assert seeds.race_ratio(seeds.load_race(str(warm)), 0.2) == (None, "the race lacks a side")
    assert seeds.race_ratio(seeds.load_race(f"{warm}+{races[0]}"), 0.2) == (0.25, "")
