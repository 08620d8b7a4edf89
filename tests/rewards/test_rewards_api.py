"""The public surface of jaxrl_llm.rewards is explicit and documented with examples."""

import inspect

import pytest

import jaxrl_llm.rewards

NAMES = jaxrl_llm.rewards.__all__


@pytest.mark.parametrize("name", NAMES)
def test_public_name_is_documented(name):
    obj = getattr(jaxrl_llm.rewards, name)
    doc = inspect.getdoc(obj) or ""
    assert doc.strip(), f"jaxrl_llm.rewards.{name} has no docstring"
    if inspect.isfunction(obj) or name in ("RewardRunner", "RewardOutput", "RewardFn"):
        assert "Example" in doc, f"jaxrl_llm.rewards.{name}: add a short example"
    if inspect.isclass(obj) and hasattr(obj, "_fields"):  # NamedTuple
        assert "Attributes:" in doc, f"jaxrl_llm.rewards.{name}: document the fields"


def test_all_lists_exactly_the_exports():
    assert list(NAMES) == sorted(set(NAMES))  # sorted, no duplicates
    for name in NAMES:
        assert hasattr(jaxrl_llm.rewards, name), f"{name} is in __all__ but not defined"
