"""The tools' modules import one another downwards only (docs/spec.md §1): no circle, not even
through an import made inside a function."""

from __future__ import annotations

import ast
from pathlib import Path

import dlpack.tools

TOOLS = Path(dlpack.tools.__file__).resolve().parent


def imports() -> dict[str, set[str]]:
    """Each module of dlpack.tools -> the modules of dlpack.tools it imports, anywhere in it."""
    modules = {path.stem for path in TOOLS.glob("*.py")}
    graph = {}
    for name in modules:
        found = set()
        for node in ast.walk(ast.parse((TOOLS / f"{name}.py").read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module == "dlpack.tools":
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module:
                found.add(node.module.removeprefix("dlpack.tools.").split(".")[0])
            elif isinstance(node, ast.Import):
                found.update(alias.name.removeprefix("dlpack.tools.").split(".")[0]
                             for alias in node.names)
        graph[name] = found & modules - {name}
    return graph


def circle(graph: dict[str, set[str]]) -> list[str]:
    """One circle of ``graph`` as the modules around it ([] when there is none)."""
    done: set[str] = set()
    path: list[str] = []

    def visit(name: str) -> list[str]:
        if name in path:
            return [*path[path.index(name):], name]
        if name in done:
            return []
        path.append(name)
        for imported in sorted(graph[name]):
            found = visit(imported)
            if found:
                return found
        path.pop()
        done.add(name)
        return []

    for name in sorted(graph):
        found = visit(name)
        if found:
            return found
    return []


def test_the_tools_import_in_no_circle():
    graph = imports()
    assert {"_grading", "check_arrow"} <= graph["check"]              # it reads them
    assert {"check", "check_consumer"} <= graph["check_cli"]          # its command line
    assert {"matrix_cases", "matrix_text"} == graph["matrix_html"]
    assert circle(graph) == [], " -> ".join(circle(graph))


def test_a_circle_is_found():
    assert circle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert circle({"a": {"b"}, "b": set()}) == []
