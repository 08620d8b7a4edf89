"""mkdocs hook: the API reference, one page per public module, generated from the source.

A public module is
1. every package (a folder with ``__init__.py``, its name not starting with ``_``) under
   ``jaxrl_llm/`` and ``kernels/``, the two roots included;
2. every module directly in ``jaxrl_llm/`` (the root re-exports none of them, so each one is its
   own public surface);
3. every submodule that a package's ``__all__`` names as a module (``from jaxrl_llm.algorithms
   import registry`` with ``"registry"`` in ``__all__``);
4. every module of a command package (one with a ``__main__.py``, run as ``python -m
   jaxrl_llm.report``): as at the root, each module is its own public surface, since such a
   package may leave modules unimported (the launcher's, so that its backends import without
   jax; ``report.check``, so that ``python -m jaxrl_llm.report.check`` runs it once).
Other modules of a subpackage are documented on their package's page, through the names its
``__all__`` re-exports. Each page is ``::: module`` (mkdocstrings renders it from the docstrings),
written at build time under ``api/``, and the nav's "API reference" section is filled here: a
module added, moved or removed changes the site without an edit. ``tests/test_docs_site.py``
checks the rule without building the site.

The build also checks what the pages show: a public function or class (in ``__all__``, or for a
module without ``__all__`` a name defined there without a leading ``_``) without a docstring is a
warning, so ``mkdocs build --strict`` fails on it.
"""

from __future__ import annotations

import ast
import logging
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("jaxrl_llm", "kernels")
API_DIR = "api"
# The nav's section titles, by the kind of module a page documents.
SECTIONS = (
    ("Packages", "package"),
    ("Modules", "module"),
    ("Kernels", "kernel"),
)

log = logging.getLogger("mkdocs.hooks.docs_api")

__all__ = ["api_pages", "public_modules"]


def _is_public_name(name: str) -> bool:
    return not name.startswith("_")


def _module_of(dotted: str, root: str) -> str | None:
    """The file of a dotted module name under root (a package's ``__init__.py``), or None."""
    base = os.path.join(root, *dotted.split("."))
    for path in (os.path.join(base, "__init__.py"), base + ".py"):
        if os.path.isfile(path):
            return path
    return None


def _exported_submodules(package: str, init_path: str, root: str) -> list[str]:
    """Submodules a package's ``__all__`` names, bound by ``from <package> import <name>``."""
    with open(init_path) as f:
        tree = ast.parse(f.read(), init_path)
    exported: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            exported = set(ast.literal_eval(node.value))
    found = []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                bound = alias.asname or alias.name
                dotted = f"{node.module}.{alias.name}"
                if bound in exported and dotted.startswith(package + ".") and dotted != package:
                    path = _module_of(dotted, root)
                    if path and not path.endswith("__init__.py"):
                        found.append(dotted)
    return found


def public_modules(root: str = ROOT) -> dict[str, str]:
    """The public modules under root, by the rule in this file's docstring.

    Args:
      root: the repository root (holds ``jaxrl_llm/`` and ``kernels/``).

    Returns:
      ``{dotted name: kind}``, kind one of ``package``, ``module``, ``kernel`` (a package under
      ``kernels/``), sorted by name.
    """
    modules: dict[str, str] = {}
    for top in PACKAGES:
        for folder, subfolders, files in os.walk(os.path.join(root, top)):
            subfolders[:] = sorted(d for d in subfolders if _is_public_name(d))
            if "__init__.py" not in files:
                continue
            package = os.path.relpath(folder, root).replace(os.sep, ".")
            modules[package] = "kernel" if top == "kernels" else "package"
            init_path = os.path.join(folder, "__init__.py")
            for sub in _exported_submodules(package, init_path, root):
                modules[sub] = "module"
            if package == "jaxrl_llm" or "__main__.py" in files:
                for name in files:
                    stem = name.removesuffix(".py")
                    if name.endswith(".py") and _is_public_name(stem):
                        modules[f"{package}.{stem}"] = "module"
    return dict(sorted(modules.items()))


def _summary(dotted: str, root: str) -> str:
    """The first paragraph of a module's docstring on one line ('' when it has none)."""
    path = _module_of(dotted, root)
    with open(path) as f:
        doc = ast.get_docstring(ast.parse(f.read(), path)) or ""
    return " ".join(doc.strip().split("\n\n")[0].split())


def api_pages(root: str = ROOT) -> dict[str, str]:
    """The generated pages: ``{path under docs/: Markdown}``, the overview first.

    Args:
      root: the repository root.

    Returns:
      ``api/index.md`` (a table of the modules with their docstrings' first paragraphs) and one
      ``api/<dotted name>.md`` per public module holding ``::: <dotted name>``.
    """
    modules = public_modules(root)
    rows = [
        f"| [`{m}`]({m}.md) | {_summary(m, root).replace('|', '/')} |"
        for title, kind in SECTIONS
        for m, k in modules.items()
        if k == kind
    ]
    index = "\n".join(
        [
            "# API reference",
            "",
            "Generated from the docstrings: one page per package, per module of the package root",
            "and of a command package (`report`, `launch`), and per kernel. A subpackage's page",
            "shows the names its `__all__` exports.",
            "",
            "| module | what it holds |",
            "| --- | --- |",
            *rows,
            "",
        ]
    )
    pages = {f"{API_DIR}/index.md": index}
    for module in modules:
        pages[f"{API_DIR}/{module}.md"] = f"::: {module}\n"
    return pages


def _api_nav(root: str) -> list:
    modules = public_modules(root)
    nav: list = [{"Overview": f"{API_DIR}/index.md"}]
    for title, kind in SECTIONS:
        entries = [{m: f"{API_DIR}/{m}.md"} for m, k in modules.items() if k == kind]
        if entries:
            nav.append({title: entries})
    return nav


def undocumented_names(root: str = ROOT) -> list[str]:
    """Public functions and classes of the public modules that have no docstring.

    Read by griffe from the source (nothing is imported). A name re-exported from a module
    outside this repository is not checked.

    Args:
      root: the repository root.

    Returns:
      Dotted names, e.g. ``["jaxrl_llm.losses.kl"]``; empty when every one has a docstring.
    """
    import griffe

    loaded = {top: griffe.load(top, search_paths=[root]) for top in PACKAGES}
    missing = []
    for dotted in public_modules(root):
        top, *rest = dotted.split(".")
        module = loaded[top]
        for part in rest:
            module = module.members[part]
        module = module.final_target if module.is_alias else module
        if not (module.docstring and module.docstring.value.strip()):
            missing.append(dotted)
        for name, member in module.members.items():
            if not member.is_public:
                continue
            try:
                target = member.final_target if member.is_alias else member
            except griffe.AliasResolutionError:
                continue  # re-exported from outside this repository
            if target.kind not in (griffe.Kind.FUNCTION, griffe.Kind.CLASS):
                continue
            if not (target.docstring and target.docstring.value.strip()):
                missing.append(f"{dotted}.{name}")
    return missing


def on_config(config):
    """Adds the "API reference" section to the nav."""
    config.nav = [*(config.nav or []), {"API reference": _api_nav(ROOT)}]
    return config


def on_files(files, config):
    """Adds the generated pages; warns (a failure under --strict) on public names without docs."""
    from mkdocs.structure.files import File

    for path, content in api_pages(ROOT).items():
        files.append(File.generated(config, path, content=content))
    for name in undocumented_names(ROOT):
        log.warning(f"{name} is public (on an API page) but has no docstring: write one")
    return files
