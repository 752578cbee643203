"""exir's modules import one another without a circle, counting imports inside functions too."""

import ast
import glob
import os
import sys
from typing import Dict, List, Set

import pytest

_PACKAGE = "edgeshare.exir"


def _modules() -> Dict[str, str]:
    """Module name -> path of every non-test module of the package, from its own folder."""
    root = os.path.dirname(os.path.abspath(__file__))
    modules = {}
    for path in glob.glob(os.path.join(root, "**", "*.py"), recursive=True):
        if path.endswith("_test.py"):
            continue
        name = ".".join([_PACKAGE, *os.path.relpath(path, root)[: -len(".py")].split(os.sep)])
        modules[name[: -len(".__init__")] if name.endswith(".__init__") else name] = path
    return modules


def _imports(path: str, modules: Dict[str, str]) -> Set[str]:
    """The package's modules a module imports, anywhere in its body."""
    found = set()
    for node in ast.walk(ast.parse(open(path, encoding="utf-8").read())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.update(m for m in [node.module] + [f"{node.module}.{a.name}" for a in node.names] if m in modules)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name in modules)
    return found


def _circles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """Strongly connected sets of more than one module (Tarjan)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    circles: List[List[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = stack[stack.index(v) :]
            del stack[stack.index(v) :]
            if len(part) > 1:
                circles.append(sorted(part))

    for v in graph:
        if v not in index:
            visit(v)
    return circles


def test_exir_modules_import_one_another_without_a_circle():
    modules = _modules()
    assert f"{_PACKAGE}._pipeline" in modules and f"{_PACKAGE}._derive" in modules
    # A package's __init__ re-exports its modules: importing the package from one of them is
    # not a dependency of the module on its siblings.
    packages = {m for m, p in modules.items() if p.endswith("__init__.py")}
    graph = {m: _imports(p, modules) - packages - {m} for m, p in modules.items() if m not in packages}
    assert _circles(graph) == []


def test_a_circle_is_found():
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


if __name__ == "__main__":
    sys.exit(pytest.main([__file__]))
