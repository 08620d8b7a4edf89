"""RL from the chain_sum_steps SFT policy: experiments/configs/from_sft_smollm2.py's four methods
(GRPO at two settings, success-only PPO, online DPO, offline DPO) start from the same policy on
the same task and held-out problems at one matched budget; their tiny versions run two steps
from a tiny SFT policy; the sweeps over them (from_sft_methods.py, ppo_lever_ablation.py)
validate against every method's tiny and full config."""

import json
import os
import subprocess
import sys

import pytest

from jaxrl_llm import sweeps
from jaxrl_llm.config_files import load_module
from jaxrl_llm.data.presets import STEP_INSTRUCTION
from jaxrl_llm.metrics import read_metrics
from jaxrl_llm.recipes import STABLE_GRPO
from jaxrl_llm.report.loading import load_run
from jaxrl_llm.stages import load_config, run_stage
from tests.run_helpers import ROOT

CONFIGS = os.path.join(ROOT, "experiments", "configs")
SWEEPS = os.path.join(ROOT, "experiments", "sweeps")
FULL = os.path.join(CONFIGS, "from_sft_smollm2.py")
TINY = os.path.join(CONFIGS, "from_sft_tiny.py")
METHODS = ("grpo", "grpo_best", "ppo", "online_dpo", "dpo")
ONLINE = ("grpo", "grpo_best", "ppo", "online_dpo")


def _field(config, key):
    node = config
    for part in key.split("."):
        node = node[part]
    return node


def test_every_method_starts_from_the_sft_policy_on_the_steps_task():
    assert load_module(FULL).METHODS == METHODS
    configs = {m: load_config(f"{FULL}:{m}") for m in METHODS}
    eval_seed = configs["grpo"].task.eval_seed
    for method, config in configs.items():
        assert config.model.name == "runs/prm_steps/sft/model", method  # the :sft stage's
        assert config.model.init == "pretrained"
        assert config.task.name == "chain_sum_steps"
        assert config.task.instruction_suffix == STEP_INSTRUCTION
        # the same held-out problems, ruler and length: the test side, scored "stated", and the
        # selection side beside it
        assert config.task.eval_size == 200 and config.task.eval_seed == eval_seed
        assert config.eval.scorer == "stated" and config.eval.selection
        assert config.eval.max_new_tokens == 96
    for method in ONLINE:
        assert configs[method].algorithm == method.removesuffix("_best")
        assert configs[method].rollout.max_new_tokens == 96 and configs[method].eval.every == 5
    grpo, grpo_best, ppo, online_dpo, dpo = (configs[m] for m in METHODS)
    assert all(_field(grpo, k) == v for k, v in STABLE_GRPO.items())  # the main job's recipe
    # the same recipe, but for the probes' setting: a rate under the recipe's, the one PPO chose
    best_grpo = load_module(FULL).BEST_GRPO
    assert all(_field(grpo_best, k) == v for k, v in best_grpo.items())
    recipe_but_best = {k: v for k, v in STABLE_GRPO.items() if k not in best_grpo}
    assert all(_field(grpo_best, k) == v for k, v in recipe_but_best.items())
    assert grpo_best.optimizer.learning_rate < grpo.optimizer.learning_rate
    probes = sweeps.load_sweep(os.path.join(SWEEPS, "grpo_sft_probes.py"))
    assert best_grpo in probes  # chosen among the probes, on the selection side
    assert (ppo.rewards.process_model, ppo.rewards.process_placement) == ("", "summed")
    # the best setting (chosen on the selection side) at the table's batch
    best = load_module(FULL).BEST_PPO
    assert ppo.loss.lam == 1.0 and ppo.optimizer.learning_rate == best["optimizer.learning_rate"]
    assert ppo.reference.ema_decay == best["reference.ema_decay"] > 0
    assert ppo.critic.pretrain_steps == best["critic.pretrain_steps"] > 0
    assert ppo.rollout.num_prompts == 8 and ppo.train.grad_accumulation == 1
    assert online_dpo.optimizer.learning_rate == 1e-5
    assert dpo.stage == "preference" and dpo.preference.loss_type == "sigmoid"
    assert dpo.preference.pairs == ""  # made from the SFT policy's samples by the verifier
    assert dpo.preference.max_new_tokens == 96 and dpo.preference.eval_every == 5


def test_the_budget_is_the_same_samples_and_pair_updates():
    """960 sampled completions each; offline DPO's 30 updates of 8 pairs are online DPO's 30
    steps of one pair for each of 8 prompts."""
    for method in ONLINE:
        c = load_config(f"{FULL}:{method}")
        assert c.train.num_steps * c.rollout.num_prompts * c.rollout.group_size == 960, method
        assert c.train.num_minibatches == 1  # one update a step
    dpo = load_config(f"{FULL}:dpo")
    assert dpo.preference.num_prompts * dpo.preference.group_size == 960
    assert (dpo.train.num_steps, dpo.preference.batch_size) == (30, 8)


def test_an_argument_that_is_not_a_method_is_one_line(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "jaxrl_llm.main", "--config", f"{FULL}:sft"]
        + ["--workdir", str(tmp_path / "run")],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 2
    want = (
        "error: from_sft_smollm2.py:sft: the method must be one of grpo, grpo_best, ppo, "
        "online_dpo, dpo, ppo_prm, ppo_rm, e.g. from_sft_smollm2.py:ppo."
    )
    assert want in proc.stderr.splitlines() and "Traceback" not in proc.stderr
    assert not (tmp_path / "run").exists()
    with pytest.raises(ValueError, match=r"^from_sft_tiny.py:rl: the method must be one of sft, "):
        load_config(f"{TINY}:rl")


def test_the_methods_sweep_is_three_seeds_of_every_method():
    trials = sweeps.load_sweep(os.path.join(SWEEPS, "from_sft_methods.py"))
    assert trials == [{"seed": 0}, {"seed": 1}, {"seed": 2}]
    for method in METHODS:
        for path in (TINY, FULL):
            configs = sweeps.check_trials(f"{path}:{method}", trials)
            assert [c.seed for c in configs] == [0, 1, 2]
    doc = load_module(os.path.join(SWEEPS, "from_sft_methods.py")).__doc__
    assert f"for method in {' '.join(METHODS)}; do" in doc  # one launch per method
    assert "--config experiments/configs/from_sft_smollm2.py:$method" in doc


def test_the_ablation_turns_one_lever_off_per_trial():
    module = load_module(os.path.join(SWEEPS, "ppo_lever_ablation.py"))
    best, off = module.BEST_PPO, module.LEVERS_OFF
    trials = sweeps.load_sweep(os.path.join(SWEEPS, "ppo_lever_ablation.py"))
    assert trials[0] == best and len(trials) == 1 + len(off)
    for trial, (lever, fields) in zip(trials[1:], off.items(), strict=True):
        changed = {k for k in best if trial[k] != best[k]}
        assert changed == set(fields), lever
    # the levers docs/ppo.md names for Xu et al. and VC-PPO, each on in the best setting
    assert best["loss.whiten_advantages"] and best["train.grad_accumulation"] > 1
    assert best["reference.ema_decay"] > 0 and best["critic.pretrain_steps"] > 0
    # the rate the probes chose on the selection side, under the one that fell; the probes'
    # last trial runs the whole setting on the selection side before the final runs
    fell = load_config(os.path.join(CONFIGS, "ppo_prm_steps_smollm2.py:rl"))
    assert best["optimizer.learning_rate"] < fell.optimizer.learning_rate
    assert off["lower rate"] == {"optimizer.learning_rate": fell.optimizer.learning_rate}
    assert sweeps.load_sweep(os.path.join(SWEEPS, "ppo_sft_probes.py"))[-1] == best
    # the ablation's "large batch" arm is the methods table's PPO
    methods_ppo = load_config(f"{FULL}:ppo")
    large_off = {**best, **off["large batch"]}
    assert all(_field(methods_ppo, k) == v for k, v in large_off.items())
    for path in (f"{TINY}:ppo", f"{FULL}:ppo"):
        for trial, config in zip(trials, sweeps.check_trials(path, trials), strict=True):
            assert all(_field(config, k) == v for k, v in trial.items())
    assert "--config experiments/configs/from_sft_smollm2.py:ppo" in module.__doc__


def test_the_learned_reward_arms_are_the_best_ppo_with_one_reward_added():
    module = load_module(FULL)
    assert module.LEARNED_REWARD_ARMS == ("ppo_prm", "ppo_rm")
    # the baseline that gains: BEST_PPO at its own batch, the lever ablation's first arm
    best = sweeps.load_sweep(os.path.join(SWEEPS, "ppo_lever_ablation.py"))[0]
    assert best == module.BEST_PPO and best["rollout.num_prompts"] == 2 * module.PROMPTS
    ppo = sweeps.check_trials(f"{FULL}:ppo", [best])[0].to_dict()
    steps = load_module(os.path.join(CONFIGS, "ppo_prm_steps_smollm2.py"))

    def changed(config):
        flat_ppo, flat = _flatten(ppo), _flatten(config.to_dict())
        return {k: v for k, v in flat.items() if flat_ppo.get(k) != v}

    prm = load_config(f"{FULL}:ppo_prm")
    assert changed(prm) == {
        "rewards.process_model": steps.PROCESS_MODEL,
        "rewards.process_placement": "dense",
    }
    # the process-reward sweep over it: its success-only arm is the ablation's BEST_PPO
    trials = sweeps.load_sweep(os.path.join(SWEEPS, "prm_refinement.py"))
    configs = sweeps.check_trials(f"{FULL}:ppo_prm", trials)
    assert _flatten(configs[0].to_dict()) == _flatten(ppo)
    assert [c.rewards.process_refinement for c in configs[1:]] == ["none", "clip", "delta"]
    rm = load_config(f"{FULL}:ppo_rm")
    levers = module.OUTCOME_RM_LEVERS
    assert set(changed(rm)) <= set(levers)  # some levers state the default (KL 0.05, 3 steps)
    assert all(_flatten(rm.to_dict())[k] == v for k, v in levers.items())
    assert rm.rewards.model == steps.OUTCOME_MODEL == "runs/prm_steps/rm/reward_model"
    # against a learned reward the KL anchors to the SFT policy: the reference does not move
    assert rm.reference.ema_decay == 0.0 < rm.loss.kl_beta and rm.rewards.task_weight == 0.0
    assert rm.rewards.model_check_action == "stop" and rm.rewards.model_whiten
    # the outcome reward model's stage: from the SFT policy, on the task at the rollout length
    stage = load_config(os.path.join(CONFIGS, "ppo_prm_steps_smollm2.py:rm"))
    assert (stage.stage, stage.model.name) == ("reward_model", "runs/prm_steps/sft/model")
    assert stage.task.name == "chain_sum_steps" and stage.rm.max_new_tokens == 96


def _flatten(tree, prefix=""):
    flat = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


@pytest.fixture(scope="module")
def sft_model(tmp_path_factory):
    """The tiny `:sft` stage, one update: the policy every tiny method starts from."""
    overrides = {
        "train.num_steps": 1,
        "train.checkpoint_every": 1,
        "sft.eval_every": 0,
        "eval.before": False,
        "eval.after": False,
    }
    workdir = tmp_path_factory.mktemp("sft")
    return run_stage(load_config(f"{TINY}:sft", overrides), str(workdir), progress=False)["model"]


@pytest.mark.parametrize("method", METHODS)
def test_each_method_runs_two_steps_from_the_tiny_sft_policy(
    tmp_path, sft_model, text_reward, method
):
    overrides = {"model.name": sft_model, "train.num_steps": 2, "eval.before": False}
    summary = run_stage(load_config(f"{TINY}:{method}", overrides), str(tmp_path), progress=False)
    assert summary["steps"] == 2
    saved = json.loads((tmp_path / "config.json").read_text())
    assert (saved["model"]["name"], saved["model"]["init"]) == (sft_model, "pretrained")
    if method == "dpo":
        assert summary["pairs"]["pairs"] > 0  # from the SFT policy's own samples
        # logged as the online methods log it: the report reads offline DPO beside them, on
        # the test side (tables) and the selection side (choices)
        for side in ("test", "selection"):
            run = load_run(str(tmp_path), side)
            assert list(run.curve) == list(run.correct) == [2], side
            assert run.curve[2] == pytest.approx(run.correct[2].mean()), side
            assert run.scorer == "stated"
        return
    assert summary["algorithm"] == method.removesuffix("_best")
    rows = read_metrics(str(tmp_path))
    assert [r["step"] for r in rows if "train/rows" in r] == [1, 2]
    evaluations = [r for r in rows if "eval/accuracy" in r]
    assert [r["step"] for r in evaluations] == [2]  # every 2 steps (the tiny cadence) and after
    assert 0.0 <= evaluations[0]["eval/selection/accuracy"] <= 1.0
