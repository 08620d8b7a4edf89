"""The import graph of `jaxrl_llm/`, built from the source: no circle beyond the known ones (none),
and no import from a lower layer up to a higher one (the layers of docs/architecture.md);
no module over 500 lines.

An edge A -> B is an import of B anywhere in A (inside functions too: a lazy import is still a
dependency); `from pkg import name` is an edge to `pkg.name` when that is a module, else to `pkg`.
Known circles would be listed exactly: a new circle fails, and so does a listed one disappearing,
so the list only shrinks; it is empty.
"""

import ast
import os
import re

ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "jaxrl_llm")

KNOWN_CYCLES: list[set[str]] = []  # keep it empty


def import_graph() -> dict[str, set[str]]:
    modules = {}
    for folder, _, files in os.walk(ROOT):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                module = os.path.relpath(path[:-3], os.path.dirname(ROOT)).replace(os.sep, ".")
                modules[module.removesuffix(".__init__")] = path
    return {module: imports_of(path, set(modules)) - {module} for module, path in modules.items()}


def imports_of(path: str, modules: set[str]) -> set[str]:
    """The modules of `modules` that the file at `path` imports, anywhere in it."""
    with open(path) as f:
        tree = ast.parse(f.read())
    found = set()
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            subs = [f"{node.module}.{a.name}" for a in node.names]
            named = [s for s in subs if s in modules]
            targets = named if len(named) == len(subs) else [node.module, *named]
        elif isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        found |= {t for t in targets if t in modules}
    return found


def cycles(edges: dict[str, set[str]]) -> list[set[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(component)

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_no_import_circle_beyond_the_known_ones():
    found = cycles(import_graph())
    new = [c for c in found if c not in KNOWN_CYCLES]
    assert not new, f"new import circles: {[sorted(c) for c in new]}"
    gone = [c for c in KNOWN_CYCLES if c not in found]
    assert not gone, f"these circles are gone; remove them from KNOWN_CYCLES: {gone}"


def test_the_cycle_finder_finds_a_circle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}]
    assert cycles({"a": {"b"}, "b": set()}) == []


ARCHITECTURE = os.path.join(os.path.dirname(ROOT), "docs", "architecture.md")


def documented_layers() -> dict[str, int]:
    """Top-level package or module name (`jaxrl_llm` for the package's __init__) -> its layer,
    read from the table in docs/architecture.md."""
    layers = {}
    with open(ARCHITECTURE) as f:
        for line in f:
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) == 4 and cells[0].isdigit():
                for name in re.findall(r"`([\w.]+)`", cells[2]):
                    assert name not in layers, f"{name} is in two layers of docs/architecture.md"
                    layers[name] = int(cells[0])
    return layers


def layer_of(module: str, layers: dict[str, int]) -> int:
    """`jaxrl_llm.runners.sampler` -> the layer of `runners`."""
    parts = module.split(".")
    top = parts[1] if len(parts) > 1 else parts[0]
    if top not in layers:
        raise AssertionError(
            f"{module}: `{top}` has no layer in docs/architecture.md; add it to the table's row "
            "where it belongs."
        )
    return layers[top]


def upward_imports(edges: dict[str, set[str]], layers: dict[str, int]) -> list[str]:
    """Every import of a module from a higher layer, as "a (layer i) imports b (layer j)"."""
    found = []
    for module in sorted(edges):
        for target in sorted(edges[module]):
            low, high = layer_of(module, layers), layer_of(target, layers)
            if high > low:
                found.append(f"{module} (layer {low}) imports {target} (layer {high})")
    return found


def test_imports_only_go_down_the_documented_layers():
    layers = documented_layers()
    edges = import_graph()
    upward = upward_imports(edges, layers)
    assert not upward, "imports up the layers of docs/architecture.md:\n" + "\n".join(upward)
    tops = {m.split(".")[1] if "." in m else m for m in edges}
    stale = sorted(set(layers) - tops)
    assert not stale, f"docs/architecture.md names what jaxrl_llm/ no longer has: {stale}"


def test_an_upward_import_is_found_at_function_level_too(tmp_path):
    """A planted lazy import from layer 2 up to layer 6 is an edge, and the check names it."""
    source = tmp_path / "probe.py"
    source.write_text("def f():\n    from jaxrl_llm.runners import sampler\n    return sampler\n")
    layers = {"models": 2, "runners": 6}
    edges = {
        "jaxrl_llm.models.probe": imports_of(str(source), {"jaxrl_llm.runners.sampler"}),
        "jaxrl_llm.runners.sampler": set(),
    }
    assert upward_imports(edges, layers) == [
        "jaxrl_llm.models.probe (layer 2) imports jaxrl_llm.runners.sampler (layer 6)"
    ]
    assert (
        upward_imports(
            {
                "jaxrl_llm.runners.sampler": {"jaxrl_llm.models.probe"},
                "jaxrl_llm.models.probe": set(),
            },
            layers,
        )
        == []
    )


MAX_MODULE_LINES = 500


def test_no_module_over_500_lines():
    """A module that outgrows 500 lines holds more than one concern: split it by concern."""
    long = []
    for folder, _, files in os.walk(ROOT):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                with open(path) as f:
                    count = sum(1 for _ in f)
                if count > MAX_MODULE_LINES:
                    long.append(f"{os.path.relpath(path, os.path.dirname(ROOT))}: {count} lines")
    assert not long, f"modules over {MAX_MODULE_LINES} lines: {long}"
