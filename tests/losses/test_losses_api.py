"""The public surface of jaxrl_llm.losses and jaxrl_llm.advantages is explicit and documented."""

import inspect

import pytest

import jaxrl_llm.advantages
import jaxrl_llm.losses

PUBLIC = [("losses", jaxrl_llm.losses, n) for n in jaxrl_llm.losses.__all__] + [
    ("advantages", jaxrl_llm.advantages, n) for n in jaxrl_llm.advantages.__all__
]


@pytest.mark.parametrize("package, module, name", PUBLIC, ids=[f"{p}.{n}" for p, _, n in PUBLIC])
def test_public_name_has_docstring(package, module, name):
    obj = getattr(module, name)
    doc = inspect.getdoc(obj) or ""
    assert doc.strip(), f"{package}.{name} has no docstring"
    if inspect.isfunction(obj):
        # Google style with shapes, and the paper it follows: See "<title>" (<id>).
        assert "Args:" in doc and "Returns:" in doc, f"{package}.{name}: Args/Returns missing"
        assert 'See "' in doc, f"{package}.{name}: no paper citation"
    else:
        assert "Attributes:" in doc, f"{package}.{name}: document the fields"


def test_all_lists_exactly_the_exports():
    for module in (jaxrl_llm.losses, jaxrl_llm.advantages):
        assert len(set(module.__all__)) == len(module.__all__)
        for name in module.__all__:
            assert hasattr(module, name), f"{module.__name__}.{name} is in __all__ but not defined"
