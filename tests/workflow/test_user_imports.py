"""`--import MODULE`: a user's module imported before the config, recorded with the run."""

import json
import os
import sys

import pytest

from jaxrl_llm import user_imports
from jaxrl_llm.launch import plan
from jaxrl_llm.user_imports import (
    import_all,
    import_module_or_file,
    imports_in_argv,
    record_imports,
    recorded_imports,
)


def _module_file(tmp_path, name, body):
    path = tmp_path / f"{name}.py"
    path.write_text(body)
    return str(path)


def test_a_file_and_a_dotted_module_import_and_register(tmp_path, monkeypatch):
    path = _module_file(tmp_path, "my_registry_mod", "REGISTERED = ['mine']\n")
    module = import_module_or_file(path)
    assert module.REGISTERED == ["mine"] and sys.modules["my_registry_mod"] is module
    assert import_module_or_file(path) is module  # a second import is the same module
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "lab").mkdir()
    (tmp_path / "lab" / "__init__.py").write_text("")
    (tmp_path / "lab" / "tasks.py").write_text("NAME = 'lab task'\n")
    assert import_module_or_file("lab.tasks").NAME == "lab task"
    assert import_all([path, "lab.tasks", path]) == [path, "lab.tasks"]


def test_a_module_that_fails_is_named_in_one_line_with_its_error(tmp_path):
    with pytest.raises(ValueError, match=r"^--import 'no_such_mod_xyz' failed: ModuleNotFound"):
        import_module_or_file("no_such_mod_xyz")
    broken = _module_file(tmp_path, "broken_mod", "raise RuntimeError('bad registration')\n")
    with pytest.raises(ValueError, match="RuntimeError: bad registration") as info:
        import_module_or_file(broken)
    assert "\n" not in str(info.value) and "broken_mod" not in sys.modules
    with pytest.raises(ValueError, match="no such file"):
        import_module_or_file(str(tmp_path / "absent.py"))


def test_the_flags_are_found_before_parsing():
    argv = ["prog", "--import", "a.b", "--import=c.py", "--config.import=x", "--workdir", "w"]
    assert imports_in_argv(argv) == ["a.b", "c.py"]


def test_a_run_records_its_imports_and_reads_them_back(tmp_path):
    workdir = str(tmp_path / "run")
    assert recorded_imports(workdir) == []
    record_imports(workdir, ["lab.tasks", "x.py"])
    assert record_imports(workdir, ["lab.tasks", "more.mod"]) == [
        "lab.tasks",
        os.path.abspath("x.py"),  # a file is kept absolute, to work from any directory
        "more.mod",
    ]
    assert recorded_imports(workdir)[0] == "lab.tasks"
    (tmp_path / "run" / user_imports.IMPORTS_FILE).write_text('{"not": "a list"}')
    with pytest.raises(ValueError, match="should hold a JSON list"):
        recorded_imports(workdir)


def test_main_stops_in_one_line_when_an_import_fails(capsys):
    from jaxrl_llm import main

    with pytest.raises(SystemExit) as info:
        main._parse_flags(["prog", "--import", "no_such_mod_xyz", "--workdir", "w"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --import 'no_such_mod_xyz' failed") and err.count("\n") == 1


def test_sweep_trials_import_what_the_launcher_imported(tmp_path):
    path = _module_file(tmp_path, "sweep_user_mod", "X = 1\n")
    argv = plan.trial_command("c.py", str(tmp_path / "w"), {"seed": 1}, imports=[path])
    assert argv[3] == f"--import={path}" and argv[4] == "--config"
    (trial,) = plan.plan(
        "experiments/configs/grpo_tiny.py", [{"seed": 1}], str(tmp_path / "s"), imports=[path]
    )
    assert f"--import={path}" in trial.argv
    assert json.loads(json.dumps(list(trial.argv)))  # plain strings, as sweep.json keeps them
