"""The layers of DESIGN.md, checked on the source: no import cycle among bertkit's modules, no pipeline importing
a sibling pipeline, nothing in models/ importing the layers above it, inference independent of training, argparse
only in cli/. Imports under `if TYPE_CHECKING:` are for type checkers only and do not count."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import bertkit

ROOT = Path(bertkit.__file__).parent


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(path): path for path in sorted(ROOT.rglob("*.py"))}


def _runtime_nodes(tree: ast.AST):
    """Every node, except the bodies of `if TYPE_CHECKING:` blocks."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            stack.extend(node.orelse)
            continue
        yield node
        stack.extend(ast.iter_child_nodes(node))


def _resolve(name: str) -> str | None:
    """The bertkit module `name` is or lies in (a.b.c -> a.b when c is a name inside module a.b)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(module: str) -> dict[str, set[str]]:
    """{imported module: names imported from it} for the bertkit modules `module` imports, at top level or lazily."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: dict[str, set[str]] = {}
    for node in _runtime_nodes(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [(alias.name, "") for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from . import x, from ..data import y
                parents = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parents + ([base] if base else []))
            targets = [(f"{base}.{alias.name}", alias.name) for alias in node.names]
        else:
            continue
        for target, name in targets:
            if target.split(".")[0] == "bertkit" and (resolved := _resolve(target)) and resolved != module:
                found.setdefault(resolved, set()).add(name)
    return found


GRAPH = {module: set(imports_of(module)) for module in MODULES}


def test_every_module_imports():
    for module in MODULES:
        if module != "bertkit.__main__":  # running it runs the command line
            importlib.import_module(module)


def test_no_import_cycles():
    """Depth-first search; a back edge is a cycle, reported as the modules along it."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []
    cycles = []

    def visit(module: str) -> None:
        state[module] = 1
        path.append(module)
        for target in sorted(GRAPH[module]):
            if state.get(target) == 1:
                cycles.append(" -> ".join(path[path.index(target):] + [target]))
            elif target not in state:
                visit(target)
        path.pop()
        state[module] = 2

    for module in sorted(GRAPH):
        if module not in state:
            visit(module)
    assert cycles == []


def _in(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_no_pipeline_imports_a_sibling_pipeline():
    pipelines = [m for m in MODULES if _in(m, "bertkit.pipelines") and m != "bertkit.pipelines"]
    assert {"bertkit.pipelines.finetune", "bertkit.pipelines.lm"} <= set(pipelines)
    offending = {m: sorted(GRAPH[m] & set(pipelines)) for m in pipelines if GRAPH[m] & set(pipelines)}
    assert offending == {}


@pytest.mark.parametrize("lower, uppers", [
    ("bertkit.models", ("bertkit.training", "bertkit.data", "bertkit.cli", "bertkit.viz", "bertkit.pipelines")),
    ("bertkit.inference", ("bertkit.training", "bertkit.pipelines", "bertkit.cli")),
    ("bertkit.data", ("bertkit.training", "bertkit.pipelines", "bertkit.cli", "bertkit.models")),
    ("bertkit.training", ("bertkit.pipelines", "bertkit.cli")),
    ("bertkit.pipelines", ("bertkit.cli", "bertkit.demo")),
])
def test_lower_layers_do_not_import_upper_ones(lower, uppers):
    offending = {m: sorted(t for t in GRAPH[m] if any(_in(t, u) for u in uppers))
                 for m in MODULES if _in(m, lower)}
    assert {m: t for m, t in offending.items() if t} == {}


def test_only_cli_parses_arguments():
    parsers = sorted(m for m, path in MODULES.items()
                     if "import argparse" in path.read_text(encoding="utf-8") and not _in(m, "bertkit.cli"))
    assert parsers == []


def test_the_graph_sees_lazy_imports_and_skips_type_checking_ones():
    # the checks above are only as good as the import reader: a lazy import counts, a TYPE_CHECKING one does not
    assert "bertkit.data.sources" in GRAPH["bertkit.explain.real_model"]  # imported inside a function
    assert "bertkit.tokenizer" not in GRAPH["bertkit.tokenizer.files"]    # only under TYPE_CHECKING
    assert GRAPH["bertkit.inference"] >= {"bertkit.data.entities", "bertkit.task_kinds"}
