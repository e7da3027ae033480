"""Imports belong at module level. A function-level import is kept only where it saves real
startup cost (a heavy SDK for a command that rarely needs it) or selects one implementation of
several, and then a comment on its line or the line above says why. This keeps it that way."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _function_imports(tree: ast.Module) -> list[ast.stmt]:
    """Every import statement inside a function body (not under `if TYPE_CHECKING`)."""
    found: list[ast.stmt] = []

    def walk(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _type_checking(child):
                continue
            inner = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            if in_function and isinstance(child, ast.Import | ast.ImportFrom):
                found.append(child)
            walk(child, inner)

    walk(tree, False)
    return found


def unexplained_imports(path: Path, root: Path = SRC) -> list[str]:
    """`path:line` of each function-level import with no comment on its line or above it; one
    comment above a run of imports (blank lines between them allowed) covers the run."""
    text = path.read_text()
    lines = text.splitlines()
    found = _function_imports(ast.parse(text))
    covered = {n for node in found for n in range(node.lineno, (node.end_lineno or 0) + 1)}
    bad = []
    for node in found:
        above = node.lineno - 1
        while above >= 1 and (above in covered or not lines[above - 1].strip()):
            above -= 1
        said = above >= 1 and lines[above - 1].strip().startswith("#")
        if "#" not in lines[node.lineno - 1] and not said:
            bad.append(f"{path.relative_to(root)}:{node.lineno}: {lines[node.lineno - 1].strip()}")
    return bad


def test_every_function_level_import_says_why() -> None:
    bad = [b for p in sorted(SRC.rglob("*.py")) for b in unexplained_imports(p)]
    assert not bad, "function-level imports without a reason comment:\n" + "\n".join(bad)


def test_the_check_sees_an_unexplained_import(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(
        "import os\n"
        "def f():\n"
        "    import json\n"
        "    # startup: the SDK only when needed\n"
        "    import sqlite3\n"
        "    import csv  # startup: rarely\n"
        "    import ssl\n"
        "    if TYPE_CHECKING:\n"
        "        import ast\n"
        "    return json, sqlite3, csv\n"
    )
    got = [node.lineno for node in _function_imports(ast.parse((tmp_path / "m.py").read_text()))]
    assert got == [3, 5, 6, 7]
    assert unexplained_imports(tmp_path / "m.py", tmp_path) == ["m.py:3: import json"]
