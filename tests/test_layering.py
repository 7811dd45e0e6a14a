"""The layers of docs/architecture.md, checked on the source: what each package may import, no import cycle, no
pipeline importing a sibling pipeline, argparse and print only in cli/. Imports under `if TYPE_CHECKING:` are for
type checkers only and do not count (an argparse import counts anywhere); imports inside functions count. The
imports made from strings count too: the package root's lazy exports and the registry's "module:Class" names obey
the same layers."""

from __future__ import annotations

import ast
import functools
import importlib
import re
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


# What each package may import besides itself, bottom to top (docs/architecture.md draws the same picture). The
# error family (bertkit/errors.py, a module at the package root) is the lowest layer: every other may import it.
ERRORS = "bertkit.errors"
ALLOWED = {
    ERRORS: set(),
    "bertkit.utils": {ERRORS},
    "bertkit.tokenizer": {ERRORS, "bertkit.utils"},
    "bertkit.models": {ERRORS, "bertkit.utils"},
    "bertkit.data": {ERRORS, "bertkit.utils", "bertkit.tokenizer"},  # not models/: data/ is made and read without them
    "bertkit.training": {ERRORS, "bertkit.utils", "bertkit.models", "bertkit.data"},
    "bertkit.inference": {ERRORS, "bertkit.utils", "bertkit.tokenizer", "bertkit.models", "bertkit.data"},
    "bertkit.pictures": {ERRORS, "bertkit.utils", "bertkit.tokenizer", "bertkit.models", "bertkit.data",
                         "bertkit.inference"},
    "bertkit.pipelines": {ERRORS, "bertkit.utils", "bertkit.tokenizer", "bertkit.models", "bertkit.data",
                          "bertkit.training", "bertkit.inference", "bertkit.pictures"},
    # the fine-tuning tasks, a module each: their records reach every floor below through the registry they fill
    "bertkit.tasks": {ERRORS, "bertkit.utils", "bertkit.tokenizer", "bertkit.models", "bertkit.data",
                      "bertkit.training", "bertkit.inference", "bertkit.pictures", "bertkit.pipelines"},
    "bertkit.cli": {ERRORS, "bertkit.utils", "bertkit.tokenizer", "bertkit.models", "bertkit.data", "bertkit.training",
                    "bertkit.inference", "bertkit.pictures", "bertkit.pipelines", "bertkit.tasks", "bertkit"},
}
# The run plumbing beside the pipelines: every pipeline may use it; it is no pipeline itself.
PLUMBING = {"bertkit.pipelines.options", "bertkit.pipelines.option_fields", "bertkit.pipelines.run_directory",
            "bertkit.pipelines.presets", "bertkit.pipelines.fine_tuning",
            *(m for m in MODULES if m.startswith("bertkit.pipelines.options."))}  # each command's options
DEMO = "bertkit.pipelines.demo"  # the main job: a recipe over pretrain and finetune
DEMO_PARTS = {"bertkit.pipelines.demo_plan", "bertkit.pipelines.demo_report"}  # its plan and its report: no pipeline


def _package(module: str) -> str | None:
    return next((p for p in ALLOWED if _in(module, p)), None)


def test_every_module_lies_in_a_layer():
    loose = sorted(m for m in MODULES if _package(m) is None and m not in ("bertkit", "bertkit.__main__"))
    assert loose == []


@pytest.mark.parametrize("package", list(ALLOWED))
def test_each_package_imports_only_the_layers_below_it(package):
    offending = {}
    for module in MODULES:
        if _package(module) != package:
            continue
        bad = sorted(t for t in GRAPH[module] if _package(t) not in ALLOWED[package] | {package} and t != "bertkit")
        if bad:
            offending[module] = bad
    assert offending == {}


def _pipeline(module: str) -> str:
    """The pipeline a module belongs to: bertkit.pipelines.NAME, itself or a module of its package (the summariser's
    two architectures are modules of bertkit.pipelines.summarization)."""
    return ".".join(module.split(".")[:3])


def test_no_pipeline_imports_a_sibling_pipeline():
    pipelines = {m for m in MODULES if _in(m, "bertkit.pipelines") and m != "bertkit.pipelines"} - PLUMBING
    assert {"bertkit.pipelines.finetune", "bertkit.pipelines.pretrain", DEMO} <= pipelines
    assert "bertkit.pipelines.summarization.unilm" in pipelines
    offending = {m: sorted(t for t in GRAPH[m] & (pipelines - DEMO_PARTS) if _pipeline(t) != _pipeline(m))
                 for m in pipelines - {DEMO}}
    assert {m: t for m, t in offending.items() if t} == {}
    assert GRAPH[DEMO] & pipelines == {"bertkit.pipelines.pretrain", "bertkit.pipelines.finetune", *DEMO_PARTS}
    assert sorted(m for m in MODULES if DEMO in GRAPH[m]) == ["bertkit.cli.train"]
    for part in DEMO_PARTS:  # the main job's own modules: the demo and the command line use them, no pipeline else
        assert {m for m in MODULES if part in GRAPH[m]} <= {DEMO, "bertkit.cli.train", *DEMO_PARTS}, part


def test_the_plumbing_imports_no_pipeline():
    pipelines = {m for m in MODULES if _in(m, "bertkit.pipelines")} - PLUMBING - {"bertkit.pipelines"}
    assert {m: sorted(GRAPH[m] & pipelines) for m in PLUMBING if GRAPH[m] & pipelines} == {}


@functools.cache
def _tree(module: str) -> ast.AST:
    return ast.parse(MODULES[module].read_text(encoding="utf-8"))


def argparse_imports(module: str) -> list[int]:
    """The lines where `module` imports argparse (`import argparse`, `from argparse import ...`), anywhere in it."""
    def is_argparse(name: str | None) -> bool:
        return name is not None and (name == "argparse" or name.startswith("argparse."))

    return sorted(node.lineno for node in ast.walk(_tree(module))
                  if isinstance(node, ast.Import) and any(is_argparse(alias.name) for alias in node.names)
                  or isinstance(node, ast.ImportFrom) and not node.level and is_argparse(node.module))


def print_calls(module: str) -> list[int]:
    """The lines where `module` calls print()."""
    return sorted(node.lineno for node in ast.walk(_tree(module))
                  if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print")


def test_only_cli_parses_arguments():
    assert argparse_imports("bertkit.cli.common")  # the reader sees cli's own parser
    parsers = {m: argparse_imports(m) for m in MODULES if not _in(m, "bertkit.cli") and argparse_imports(m)}
    assert parsers == {}


def test_nothing_below_cli_prints():
    """The library says what it has to say in return values, exceptions, warnings, logging or a writer it is given;
    only cli/ prints for people."""
    assert print_calls("bertkit.cli")  # the reader sees cli's own prints
    printers = {m: print_calls(m) for m in MODULES if not _in(m, "bertkit.cli") and print_calls(m)}
    assert printers == {}


# The package root imports only bertkit.tasks at import time (its modules fill the task registry); `bertkit.X`
# imports X's module on first use (`_EXPORTS`). Only cli/ may import the root, so what it exports comes from the
# layers below cli.
ROOT_EXPORTS_FROM = ALLOWED["bertkit.cli"] - {"bertkit"}


def test_the_root_exports_resolve_from_the_layers_below_cli():
    assert bertkit._EXPORTS and set(bertkit.__all__) == set(bertkit._EXPORTS) | {"__version__"}
    offending = {}
    for name, module in bertkit._EXPORTS.items():
        value = getattr(bertkit, name)
        assert value is getattr(importlib.import_module(module), name), name
        homes = {_resolve(module), _resolve(value.__module__)}  # where the name is exported from and defined
        if None in homes or any(_package(home) not in ROOT_EXPORTS_FROM for home in homes):
            offending[name] = sorted(map(str, homes))
    assert offending == {}


NAME_IN_MODULE = re.compile(r"bertkit(\.[A-Za-z_]\w*)+:[A-Za-z_]\w*")  # "bertkit.models.bert.heads:BertForMaskedLM"


def named_objects(module: str) -> set[str]:
    """The "module:name" strings in `module`'s source: an import made when the string is resolved."""
    return {node.value for node in ast.walk(_tree(module))
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and NAME_IN_MODULE.fullmatch(node.value)}


NAMED = {module: named for module in MODULES if (named := named_objects(module))}


def test_the_registry_names_real_objects_in_the_layers_it_may_import():
    from bertkit.models.registry import FAMILIES

    in_registry = {name for f in FAMILIES for name in (f.config, f.chooser, *f.heads.values())}
    assert in_registry and in_registry <= NAMED["bertkit.models.registry"]  # the reader sees every family's names
    offending = {}
    for holder, named in NAMED.items():
        for dotted in sorted(named):
            target, _, name = dotted.partition(":")
            assert target in MODULES, f"{holder}: {dotted} names no bertkit module"
            assert getattr(importlib.import_module(target), name, None) is not None, f"{holder}: {dotted} is missing"
            if _package(target) not in ALLOWED.get(_package(holder), set()) | {_package(holder)}:
                offending.setdefault(holder, []).append(dotted)
    assert offending == {}


def test_the_graph_sees_lazy_imports_and_skips_type_checking_ones():
    # the checks above are only as good as the import reader: a lazy import counts, a TYPE_CHECKING one does not
    assert "bertkit.data.sources" in GRAPH["bertkit.pictures.explain.real_model"]  # imported inside a function
    assert "bertkit.tokenizer" not in GRAPH["bertkit.tokenizer.files"]             # only under TYPE_CHECKING
    assert GRAPH["bertkit.inference.predict"] >= {"bertkit.data.entities"}


def test_the_architecture_page_names_every_package():
    page = (ROOT.parents[1] / "docs" / "architecture.md").read_text(encoding="utf-8")
    for package in ALLOWED:
        name = package.removeprefix("bertkit.")
        assert f"`{name}/`" in page or f"`{name}.py`" in page, name


def _top_level_imports(module: str) -> set[str]:
    """The bertkit modules `module` imports when it is imported (not inside a function or class)."""
    found = set()
    for node in _tree(module).body:
        names = ([alias.name for alias in node.names] if isinstance(node, ast.Import) else
                 [f"{node.module}.{alias.name}" for alias in node.names] if isinstance(node, ast.ImportFrom)
                 and node.module and not node.level else [])
        found |= {resolved for name in names if name.startswith("bertkit") and (resolved := _resolve(name))}
    return found


def test_the_root_imports_the_task_registry_and_nothing_heavy():
    assert _top_level_imports("bertkit") == {"bertkit.tasks"}
    tasks = {m for m in MODULES if _in(m, "bertkit.tasks") and m != "bertkit.tasks"}
    assert {"bertkit.tasks.classify", "bertkit.tasks.ner", "bertkit.tasks.qa"} <= tasks
    # a task module's top level: the registry, the error family, the constants, a sibling task; the rest when called
    light = {"bertkit.data.task_kinds", ERRORS, "bertkit.utils.constants", *tasks}
    assert {m: sorted(_top_level_imports(m) - light) for m in tasks if _top_level_imports(m) - light} == {}
    import subprocess
    import sys

    loaded = subprocess.run([sys.executable, "-c", "import sys, bertkit; from bertkit.data.task_kinds import TASKS; "
                             "print(list(TASKS), 'torch' in sys.modules, 'numpy' in sys.modules)"],
                            capture_output=True, text=True, check=True).stdout.split()
    assert loaded == ["['classify',", "'pairs',", "'ner',", "'qa',", "'embedding']", "False", "False"]
