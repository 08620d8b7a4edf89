"""Config files loaded by path (jaxrl_llm.config_files): `file.py:arg`, siblings, clear errors."""

import os

import pytest

from jaxrl_llm.config import apply_overrides, config_for, error_line
from jaxrl_llm.config_files import (
    config_file_error,
    config_from_file,
    sibling_config,
    split_config_arg,
    unknown_config_flag,
)
from jaxrl_llm.stages import load_config
from tests.run_helpers import ROOT

CONFIGS = os.path.join(ROOT, "experiments", "configs")


def test_split_config_arg_follows_config_flags():
    assert split_config_arg("a/b.py:prm") == ("a/b.py", "prm")
    assert split_config_arg("a/b.py") == ("a/b.py", None)
    assert split_config_arg("C:/x/b.py") == ("C:/x/b.py", None)  # a colon before the file name
    assert split_config_arg("b.py:") == ("b.py:", None)


def test_an_unknown_config_flag_names_the_full_key_and_the_closest_field():
    tiny = os.path.join(CONFIGS, "grpo_tiny.py")
    argv = ["main", "--config", tiny, "--config.train.num_steps=2", "--config.train.num_stepz=1"]
    assert unknown_config_flag(argv) == (
        "--config.train.num_stepz is not a config field; did you mean --config.train.num_steps?"
    )
    # a misspelt section, the `--config=FILE` and `--config.KEY VALUE` forms
    assert unknown_config_flag([f"--config={tiny}", "--config.trainn.num_steps", "1"]) == (
        "--config.trainn.num_steps is not a config field; did you mean --config.train.num_steps?"
    )
    assert unknown_config_flag(["--config", tiny, "--config.zzzzzz=1"]) == (
        "--config.zzzzzz is not a config field (none is close; check its spelling)."
    )
    assert unknown_config_flag(["--config", tiny, "--config.train.num_steps=1"]) is None
    assert unknown_config_flag(["--config", "missing.py", "--config.a=1"]) is None


def test_a_config_files_own_value_error_is_its_one_line(tmp_path):
    """What the command line prints for a file that refuses its argument after ':' (absl would
    print the file's traceback); other failures are left to absl's message."""
    path = tmp_path / "stages.py"
    path.write_text(
        "import ml_collections\n"
        "def get_config(stage='a'):\n"
        "    if stage not in ('a', 'b'):\n"
        "        raise ValueError(f'stages.py:{stage}: the stage must be one of a, b.')\n"
        "    return ml_collections.ConfigDict({'stage': stage})\n"
    )
    assert config_file_error(["main", "--config", f"{path}:c", "--workdir", "w"]) == (
        "stages.py:c: the stage must be one of a, b."
    )
    assert config_file_error([f"--config={path}:b"]) is None  # it loads
    assert config_file_error(["--config", str(tmp_path / "missing.py")]) is None
    assert config_file_error(["--workdir", "w"]) is None


def test_an_unknown_override_prints_without_quotes():
    with pytest.raises(KeyError) as info:
        apply_overrides(config_for("grpo"), {"loss.clip_hihg": 0.3})
    assert error_line(info.value) == (
        "loss.clip_hihg is not a config field; did you mean loss.clip_high?"
    )
    assert error_line(ValueError("a\\nb\n c")) == "a b c"


def test_config_arg_calls_get_config_with_it(tmp_path):
    (tmp_path / "two.py").write_text(
        "import ml_collections\n"
        "def get_config(which='a'):\n"
        "    return ml_collections.ConfigDict({'which': which})\n"
    )
    assert config_from_file(str(tmp_path / "two.py")).which == "a"
    assert config_from_file(f"{tmp_path / 'two.py'}:b").which == "b"


def test_sibling_config_reads_the_file_beside_the_anchor(tmp_path):
    (tmp_path / "base.py").write_text(
        "import ml_collections\ndef get_config(n=1):\n    return ml_collections.ConfigDict({'n': n})\n"
    )
    assert sibling_config(str(tmp_path / "derived.py"), "base.py", 7).n == 7


def test_missing_file_and_missing_get_config_say_so(tmp_path):
    with pytest.raises(FileNotFoundError, match="Config file not found"):
        config_from_file(str(tmp_path / "nope.py"))
    (tmp_path / "empty.py").write_text("X = 1\n")
    with pytest.raises(
        AttributeError, match=r"empty.py: a config file must define `get_config\(\)`"
    ):
        config_from_file(str(tmp_path / "empty.py"))


def test_the_ppo_pod_config_shares_the_grpo_pod_shapes():
    grpo = config_from_file(os.path.join(CONFIGS, "grpo_llama8b_pod.py"))
    ppo = config_from_file(os.path.join(CONFIGS, "ppo_llama8b_pod.py"))
    for section, field in [
        ("model", "name"),
        ("model", "param_dtype"),
        ("rollout", "num_prompts"),
        ("rollout", "max_new_tokens"),
        ("train", "num_minibatches"),
        ("train", "remat"),
        ("optimizer", "learning_rate"),
    ]:
        assert ppo[section][field] == grpo[section][field], (section, field)
    assert ppo.algorithm == "ppo" and ppo.loss.kl_beta == 0.05


def test_load_config_takes_a_stage_argument():
    """The `:prm` stage of the steps pipeline, validated as a process-reward-model config."""
    config = load_config(os.path.join(CONFIGS, "ppo_prm_steps_tiny.py:prm"))
    assert config.stage == "process_reward_model"
    assert config.task.name == "chain_sum_steps"


class _Built(Exception):
    """Raised by a stage's build: the run got past validation."""


@pytest.mark.parametrize(
    "config_file, module, stage_name, train",
    [
        ("sft_tiny.py", "jaxrl_llm.stages.sft", "SFT", "train_sft"),
        ("rm_tiny.py", "jaxrl_llm.stages.reward_model", "REWARD_MODEL", "train_reward_model"),
        ("dpo_tiny.py", "jaxrl_llm.stages.preference", "PREFERENCE", "train_preference"),
    ],
)
def test_a_loaded_supervised_config_is_validated_once(
    tmp_path, monkeypatch, config_file, module, stage_name, train
):
    """The command line's path (load_config validates, run_stage runs) does not check again;
    the stage's own train function, called directly, checks once."""
    import importlib

    from jaxrl_llm.stages import run_stage

    stage_module = importlib.import_module(module)
    calls = []

    def build(config, workdir):
        raise _Built

    counted = getattr(stage_module, stage_name)._replace(
        validate=lambda config: calls.append(config), build=build
    )
    monkeypatch.setattr(stage_module, stage_name, counted)
    config = load_config(os.path.join(CONFIGS, config_file))
    with pytest.raises(_Built):
        run_stage(config, str(tmp_path / "cli"), progress=False)
    assert calls == []
    with pytest.raises(_Built):
        getattr(stage_module, train)(config, str(tmp_path / "direct"), progress=False)
    assert len(calls) == 1


@pytest.mark.parametrize(
    "name", sorted(f for f in os.listdir(CONFIGS) if f.endswith(".py") and not f.startswith("_"))
)
def test_every_shipped_config_file_loads_and_validates(name):
    """Each config in experiments/configs passes its stage's validation as shipped, so a
    documented command does not stop at a field the code has since renamed or checks anew."""
    config = load_config(os.path.join(CONFIGS, name))
    assert "stage" in config or "stages" in config or "algorithm" in config, sorted(config)
