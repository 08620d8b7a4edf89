"""The documentation site's sources, checked without building it (`bash scripts/docs.sh` builds).

The API rule: every public module has a page in the API reference, where a public module is
- every package (a folder with `__init__.py`, its name not starting with `_`) under `jaxrl_llm/`
  and `kernels/`, the two roots included;
- every module directly in `jaxrl_llm/` whose name does not start with `_`;
- every module that a package's `__all__` names (the package binds the name to the module);
- every module of a command package (one with a `__main__.py`: `python -m jaxrl_llm.report`).
The expected set is computed here from the files and, for the third kind, from the imported
packages, independently of `scripts/docs_api.py`, the mkdocs hook that writes the pages. Also: every
Markdown page under docs/ is in the nav (or listed in `not_in_nav`), every nav entry exists, the
Python snippets of the guides import what exists and the config and sweep examples run, and the
griffe extension reads the docstring conventions as documented.
"""

import ast
import importlib
import importlib.util
import inspect
import os
import pathlib
import re
import types

import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def _load_script(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


docs_api = _load_script("docs_api")
docs_griffe = _load_script("docs_griffe")


def _mkdocs_config():
    with open(ROOT / "mkdocs.yml") as f:
        return yaml.safe_load(f)


def _nav_files(nav):
    for entry in nav:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        if isinstance(value, list):
            yield from _nav_files(value)
        else:
            yield value


def _expected_public_modules():
    packages = {
        ".".join(init.parent.relative_to(ROOT).parts)
        for top in ("jaxrl_llm", "kernels")
        for init in (ROOT / top).rglob("__init__.py")
        if not any(part.startswith("_") for part in init.parent.relative_to(ROOT).parts)
    }
    flat = {
        f"jaxrl_llm.{path.stem}"
        for path in (ROOT / "jaxrl_llm").glob("*.py")
        if not path.stem.startswith("_")
    }
    commands = {
        f"{name}.{path.stem}"
        for name in packages
        if (ROOT / name.replace(".", "/") / "__main__.py").is_file()
        for path in (ROOT / name.replace(".", "/")).glob("*.py")
        if not path.stem.startswith("_")
    }
    exported = set()
    for name in packages:
        package = importlib.import_module(name)
        for attr in getattr(package, "__all__", ()):
            value = vars(package).get(attr)  # not getattr: lazy names load optional extras
            if inspect.ismodule(value) and value.__name__.startswith(name + "."):
                exported.add(value.__name__)
    return packages | flat | exported | commands


def test_every_public_module_has_an_api_page():
    expected = _expected_public_modules()
    pages = docs_api.api_pages(str(ROOT))
    documented = {
        m.group(1) for text in pages.values() for m in re.finditer(r"^::: (\S+)$", text, re.M)
    }
    assert expected - documented == set(), "public modules without an API page"
    assert documented - expected == set(), "API pages of modules the rule does not name"
    # exact cases of each kind of the rule
    assert {"jaxrl_llm", "jaxrl_llm.losses", "jaxrl_llm.envs.tasks", "kernels.logprobs"} <= expected
    assert {"jaxrl_llm.config", "jaxrl_llm.algorithms.registry"} <= expected
    assert {"jaxrl_llm.report.check", "jaxrl_llm.launch.backends"} <= expected  # command packages
    assert "jaxrl_llm.losses.kl" not in expected  # `kl` in losses.__all__ is the function


def test_api_pages_and_their_nav():
    pages = docs_api.api_pages(str(ROOT))
    modules = docs_api.public_modules(str(ROOT))
    assert pages["api/jaxrl_llm.losses.md"] == "::: jaxrl_llm.losses\n"
    assert modules["jaxrl_llm.losses"] == "package" and modules["kernels.logprobs"] == "kernel"
    assert modules["jaxrl_llm.config"] == "package" and modules["jaxrl_llm.metrics"] == "module"
    index = pages["api/index.md"]
    for module in modules:
        assert f"[`{module}`]({module}.md)" in index
    assert not (DOCS / "api").exists()  # generated at build time, never committed
    assert (
        "| [`jaxrl_llm.report`](jaxrl_llm.report.md) | One report for learning runs: held-out "
        "accuracy over seeds with 95% intervals, as text, Markdown and a PNG of the held-out "
        "curves. |"
    ) in index
    config = types.SimpleNamespace(nav=[{"Home": "index.md"}])
    docs_api.on_config(config)
    [home, api] = config.nav
    assert home == {"Home": "index.md"} and set(_nav_files(api["API reference"])) == set(pages)


def test_every_docs_page_is_in_the_nav_and_every_nav_entry_exists():
    config = _mkdocs_config()
    assert config["strict"] is True and "scripts/docs_api.py" in config["hooks"]
    nav = set(_nav_files(config["nav"]))
    not_in_nav = [line.strip().lstrip("/") for line in config["not_in_nav"].splitlines()]
    pages = {
        path.relative_to(DOCS).as_posix()
        for path in DOCS.rglob("*.md")
        if not any(pathlib.PurePath(path.relative_to(DOCS)).match(p) for p in not_in_nav)
    }
    assert pages - nav == set(), "pages missing from mkdocs.yml's nav"
    assert nav - pages == set(), "nav entries without a page"
    assert "figures/pipeline/eval_base.md" not in pages  # a table beside a figure


def test_benchmarks_page_includes_the_results_file():
    text = (DOCS / "reports" / "benchmarks.md").read_text()
    [included] = re.findall(r'^--8<-- "(.+)"$', text, re.M)
    assert included == "experiments/benchmarks/RESULTS.md" and (ROOT / included).is_file()


def _python_blocks(page):
    return re.findall(r"```python\n(.*?)```", (DOCS / page).read_text(), re.S)


def test_docs_snippets_import_what_exists():
    checked = 0
    for path in sorted(DOCS.rglob("*.md")):
        for block in _python_blocks(path.relative_to(DOCS)):
            for node in ast.walk(ast.parse(block, str(path))):
                if isinstance(node, ast.ImportFrom) and node.module.split(".")[0] == "jaxrl_llm":
                    module = importlib.import_module(node.module)
                    for alias in node.names:
                        assert hasattr(module, alias.name), f"{path}: {node.module}.{alias.name}"
                        checked += 1
    assert checked >= 6


def test_configs_and_sweeps_examples_run():
    from jaxrl_llm.config import validate_config

    [example] = [b for b in _python_blocks("configs.md") if "def get_config" in b]
    namespace = {}
    exec(compile(example, "configs.md", "exec"), namespace)
    config = namespace["get_config"]()
    validate_config(config)
    assert config.task.name == "gcd" and config.stabilise.dynamic_sampling is True
    [example] = [b for b in _python_blocks("sweeps.md") if "def sweep" in b]
    namespace = {}
    exec(compile(example, "sweeps.md", "exec"), namespace)
    assert namespace["sweep"]() == [
        {"loss.advantage": "grpo", "optimizer.learning_rate": 1e-5, "seed": 0},
        {"loss.advantage": "grpo", "optimizer.learning_rate": 3e-5, "seed": 1},
        {"loss.advantage": "rloo", "optimizer.learning_rate": 1e-5, "seed": 0},
        {"loss.advantage": "rloo", "optimizer.learning_rate": 3e-5, "seed": 1},
    ]


def test_docstring_conventions():
    normalise = docs_griffe.normalise_docstring
    assert normalise("Args:\n  a, b: two ints.") == "Args:\n  a: two ints.\n  b: two ints."
    text = (
        "Sum.\n\nArgs:\n  x_b, y_b (int): two\n    lines.\n\n  z: one, two: three.\n\n"
        "Returns:\n  a, b: a pair.\n\nExample:\n  >>> f(1)\n  2"
    )
    assert normalise(text) == (
        "Sum.\n\nArgs:\n  x_b (int): two\n    lines.\n  y_b (int): two\n    lines.\n\n"
        "  z: one, two: three.\n\nReturns:\n  a, b: a pair.\n\nExamples:\n  >>> f(1)\n  2"
    )
    # a continuation line that looks like an entry stays as it is
    nested = "Args:\n  a: one\n    b, c: not an entry."
    assert normalise(nested) == nested


def test_docs_script_builds_strictly_and_ci_runs_it():
    script = (ROOT / "scripts" / "docs.sh").read_text()
    assert 'setup_env.sh" "docs"' in script and "mkdocs build --strict" in script
    ci = (ROOT / ".ci" / "run").read_text()
    assert ci.index("bash scripts/test.sh ||") < ci.index("bash scripts/docs.sh || exit $?")
    assert os.access(ROOT / "scripts" / "docs.sh", os.X_OK)
