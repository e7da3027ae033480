"""The import rules: layers (domain <- placement <- services <- daemon <- faces), no runtime
module imports the development tooling (both are import-linter contracts in pyproject.toml),
no import cycle between modules, and no module imports another's private names. Type-only
imports under `TYPE_CHECKING` do not count."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[2]
# `lint-imports`, run by this interpreter (the console script may not be on PATH).
LINT = (
    "import sys\n"
    "from importlinter.cli import lint_imports_command\n"
    "sys.exit(lint_imports_command())"
)


def test_import_linter_contracts_are_kept() -> None:
    run = subprocess.run(
        [sys.executable, "-c", LINT, "--no-cache", str(ROOT / "pyproject.toml")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert "Contracts: " in run.stdout, run.stdout + run.stderr
    assert run.returncode == 0, run.stdout[run.stdout.find("Contracts: ") :] + run.stderr
    assert "Contracts: 2 kept, 0 broken." in run.stdout, run.stdout


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan, iterative)."""
    edges = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, 0)]
        while work:
            node, child = work.pop()
            if child == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            if child < len(edges[node]):
                work.append((node, child + 1))
                nxt = edges[node][child]
                if nxt not in index:
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return found


def test_no_import_cycle_between_modules() -> None:
    graph = grimp.build_graph(
        "fedhpc", "fedhpc_dev", exclude_type_checking_imports=True, cache_dir=None
    )
    cycles = _cycles(graph)
    assert not cycles, "import cycles (break each one; a function-level import is no fix):\n" + (
        "\n".join(" <-> ".join(group) for group in cycles)
    )


def test_the_cycle_finder_sees_a_cycle_and_skips_type_only_imports(tmp_path: Path) -> None:
    pkg = tmp_path / "cyc"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from cyc import b\n")
    (pkg / "b.py").write_text("def f() -> None:\n    from cyc import c\n")
    (pkg / "c.py").write_text("import cyc.a\n")
    (pkg / "d.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from cyc import e\n"
    )
    (pkg / "e.py").write_text("from cyc import d\n")
    sys.path.insert(0, str(tmp_path))
    try:
        graph = grimp.build_graph("cyc", exclude_type_checking_imports=True, cache_dir=None)
    finally:
        sys.path.remove(str(tmp_path))
    assert _cycles(graph) == [["cyc.a", "cyc.b", "cyc.c"]]


def _private_imports() -> list[str]:
    """`from fedhpc.x import _name` anywhere under src/: a private name used across modules."""
    out = []
    for path in sorted((ROOT / "src").rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("fedhpc"):
                out += [
                    f"{path.relative_to(ROOT)}:{node.lineno}: {node.module}.{a.name}"
                    for a in node.names
                    if a.name.startswith("_") and not a.name.startswith("__")
                ]
    return out


def test_no_module_imports_a_private_name_of_another() -> None:
    assert _private_imports() == []
