"""The public surface of jaxrl_llm.data is explicit and documented with examples."""

import inspect

import pytest

import jaxrl_llm.data

NAMES = jaxrl_llm.data.__all__


@pytest.mark.parametrize("name", NAMES)
def test_public_name_is_documented(name):
    obj = getattr(jaxrl_llm.data, name)
    doc = inspect.getdoc(obj) or ""
    assert doc.strip(), f"jaxrl_llm.data.{name} has no docstring"
    if inspect.isfunction(obj) or name in (
        "Example",
        "ReasoningGymSource",
        "JsonlSource",
        "TfdsSource",
        "PromptBatcher",
    ):
        assert "Example" in doc, f"jaxrl_llm.data.{name}: add a short example"
    if inspect.isclass(obj) and hasattr(obj, "_fields"):  # NamedTuple
        assert "Attributes:" in doc, f"jaxrl_llm.data.{name}: document the fields"


def test_all_lists_exactly_the_exports():
    assert list(NAMES) == sorted(set(NAMES))  # sorted, no duplicates
    for name in NAMES:
        assert hasattr(jaxrl_llm.data, name), f"{name} is in __all__ but not defined"
