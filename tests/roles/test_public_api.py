"""Every public name of the algorithms, roles, runners, stages, evals and envs packages has a
docstring."""

import importlib

import pytest


@pytest.mark.parametrize(
    "package",
    [
        "jaxrl_llm.algorithms",
        "jaxrl_llm.roles",
        "jaxrl_llm.runners",
        "jaxrl_llm.stages",
        "jaxrl_llm.evals",
        "jaxrl_llm.envs",
    ],
)
def test_public_names_have_docstrings(package):
    module = importlib.import_module(package)
    assert module.__doc__
    missing = []
    for name in module.__all__:
        obj = getattr(module, name)
        if callable(obj) and not (getattr(obj, "__doc__", None) or "").strip():
            missing.append(name)
    assert not missing, f"{package}: no docstring for {missing}"
