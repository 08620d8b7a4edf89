"""The import graph of `jaxrl_llm/`, built from the source: no circle beyond the known ones (none).

An edge A -> B is an import of B anywhere in A (inside functions too: a lazy import is still a
dependency); `from pkg import name` is an edge to `pkg.name` when that is a module, else to `pkg`.
Known circles would be listed exactly: a new circle fails, and so does a listed one disappearing,
so the list only shrinks; issue 45 emptied it.
"""

import ast
import os

ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "jaxrl_llm")

KNOWN_CYCLES: list[set[str]] = []  # issue 45 removed the last ones; keep it empty


def import_graph() -> dict[str, set[str]]:
    modules = {}
    for folder, _, files in os.walk(ROOT):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                module = os.path.relpath(path[:-3], os.path.dirname(ROOT)).replace(os.sep, ".")
                modules[module.removesuffix(".__init__")] = path
    edges = {m: set() for m in modules}
    for module, path in modules.items():
        with open(path) as f:
            tree = ast.parse(f.read())
        for node in ast.walk(tree):
            targets = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                subs = [f"{node.module}.{a.name}" for a in node.names]
                found = [s for s in subs if s in modules]
                targets = found if len(found) == len(subs) else [node.module, *found]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            edges[module] |= {t for t in targets if t in modules and t != module}
    return edges


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
