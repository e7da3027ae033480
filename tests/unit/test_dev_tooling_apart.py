"""The development tooling (src/fedhpc_dev) stays apart: no runtime module imports it or names
the dev federation in its code, and its commands and profiles reach `fedhpc` only through the
`fedhpc.commands` and `fedhpc.profiles` entry points."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import tomllib
from importlib.metadata import entry_points
from pathlib import Path

from fedhpc.cli.main import COMMANDS_GROUP, build_parser
from fedhpc.profiles import load_profiles, shipped_profiles_dir
from fedhpc.profiles.sources import PROFILES_GROUP
from fedhpc_dev.profiles import DEVFED_PROFILES, dev_profiles_dir

SRC = Path(__file__).resolve().parents[2] / "src"
# The registry of every FEDHPC_* variable (with its default and its reader), the dev tooling's
# among them: the one runtime module that names them.
REGISTRY = SRC / "fedhpc" / "settings" / "__init__.py"


def _imported_modules(path: Path) -> set[str]:
    """Every module an `import` or `from ... import` in the file names (any scope, including
    under TYPE_CHECKING and inside functions)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            out |= {f"{node.module}.{alias.name}" for alias in node.names}
    return out


def test_no_runtime_module_imports_the_dev_tooling() -> None:
    files = sorted((SRC / "fedhpc").rglob("*.py"))
    assert len(files) > 100  # the runtime package was found
    offenders = [
        f"{path.relative_to(SRC)}: {name}"
        for path in files
        for name in sorted(_imported_modules(path))
        if name == "fedhpc_dev" or name.startswith("fedhpc_dev.")
    ]
    assert offenders == []


def test_the_import_check_sees_every_form_of_import(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import fedhpc_dev\n"
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from fedhpc_dev.devfed.sshd import SshFront\n"
        "def f() -> None:\n"
        "    import fedhpc_dev.localsched.model as m\n"
        "    from fedhpc_dev import demo\n"
    )
    names = _imported_modules(probe)
    assert {"fedhpc_dev", "fedhpc_dev.devfed.sshd", "fedhpc_dev.localsched.model"} <= names
    assert "fedhpc_dev.demo" in names


def _docstrings(tree: ast.AST) -> set[int]:
    return {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }


def _devfed_references(path: Path) -> list[str]:
    """Where the file's code names the dev federation: an identifier with `devfed` in it (any
    case), or a string other than a docstring naming the dev tooling's package (`fedhpc_dev`,
    as a module to run). Prose (docstrings, comments, messages naming `fedhpc devfed`) is not
    code."""
    tree = ast.parse(path.read_text(), str(path))
    docs = _docstrings(tree)
    out = []
    for node in ast.walk(tree):
        names: list[str | None] = []
        if isinstance(node, ast.Name):
            names = [node.id]
        elif isinstance(node, ast.Attribute):
            names = [node.attr]
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names = [node.name]
        elif isinstance(node, ast.arg):
            names = [node.arg]
        elif isinstance(node, ast.alias):
            names = [node.name, node.asname]
        elif isinstance(node, ast.keyword):
            names = [node.arg]
        out += [
            f"{path.name}:{getattr(node, 'lineno', 0)}: {n}"
            for n in names
            if n and "devfed" in n.lower()
        ]
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docs
            and "fedhpc_dev" in node.value
        ):
            out.append(f"{path.name}:{node.lineno}: {node.value!r}")
    return out


def test_no_runtime_module_names_the_dev_federation() -> None:
    files = [p for p in sorted((SRC / "fedhpc").rglob("*.py")) if p != REGISTRY]
    assert len(files) > 100  # the runtime package was found
    assert [ref for path in files for ref in _devfed_references(path)] == []


def test_the_devfed_check_sees_names_and_module_strings(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        '"""A module about fedhpc_dev and the devfed: prose."""\n'
        "from fedhpc.settings import DEVFED\n"
        "def devfed_root(devfed_dir: str) -> str:\n"
        '    """fedhpc_dev.localsched is prose here."""\n'
        "    return settings.DEVFED_DIR.read()\n"
        'SCHEDULER = "fedhpc_dev.localsched"\n'
        "f(devfed=1)\n"
        'HINT = "run `fedhpc devfed up`"\n'
    )
    assert sorted(_devfed_references(probe)) == [
        "probe.py:2: DEVFED",
        "probe.py:3: devfed_dir",
        "probe.py:3: devfed_root",
        "probe.py:5: DEVFED_DIR",
        "probe.py:6: 'fedhpc_dev.localsched'",
        "probe.py:7: devfed",
    ]


def test_the_dev_profiles_are_a_registered_entry_point() -> None:
    registered = {ep.name: ep.value for ep in entry_points(group=PROFILES_GROUP)}
    assert registered == {"devfed": "fedhpc_dev.profiles:DEVFED_PROFILES"}


def test_no_local_test_profile_ships_in_the_runtime_package() -> None:
    # Every TOML file under src/fedhpc, read as data (not through the loader, which a profile
    # source could rewrite): the local federation's profiles belong to fedhpc_dev.
    files = sorted((SRC / "fedhpc").rglob("*.toml"))
    assert shipped_profiles_dir() / "delta.toml" in files  # the shipped folder was searched
    local = [
        str(path.relative_to(SRC))
        for path in files
        if tomllib.loads(path.read_text()).get("local_test") is True
    ]
    assert local == []


def test_the_dev_profiles_ship_with_the_dev_tooling_and_load_through_its_source() -> None:
    mine = sorted(p.stem for p in dev_profiles_dir().glob("*.toml"))
    assert mine == ["devanvil", "devdelta", "devdeltaai", "devpolaris", "devvista"]
    assert DEVFED_PROFILES.profile_dirs() == (dev_profiles_dir(),)
    profiles = load_profiles()
    assert all(profiles[name].local_test for name in mine)
    assert not any(p.local_test for name, p in profiles.items() if name not in mine)


def test_the_dev_commands_are_registered_entry_points() -> None:
    registered = {ep.name: ep.value for ep in entry_points(group=COMMANDS_GROUP)}
    assert registered == {
        "demo": "fedhpc_dev.demo.cli:add_parser",
        "devfed": "fedhpc_dev.devfed.cli:add_parser",
    }
    parser = build_parser()
    choices = next(a.choices for a in parser._subparsers._actions if a.choices)  # type: ignore[union-attr]
    assert {"demo", "devfed", "daemon", "serve"} <= set(choices)


def test_a_command_that_cannot_load_is_named_and_the_others_still_work(tmp_path: Path) -> None:
    # A real (if broken) distribution on the path: importlib.metadata finds its entry points.
    dist = tmp_path / "brokenplugin-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: brokenplugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        f"[{COMMANDS_GROUP}]\nbroken = fedhpc_no_such_module:add_parser\n"
    )
    path = os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    out = subprocess.run(
        [sys.executable, "-m", "fedhpc.cli.main", "--help"],
        env={**os.environ, "PYTHONPATH": path},
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert "fedhpc: command 'broken' (fedhpc_no_such_module:add_parser) could not be loaded" in (
        out.stderr
    )
    assert "No module named 'fedhpc_no_such_module'" in out.stderr
    assert "    devfed " in out.stdout
    assert "    demo " in out.stdout
    assert "broken" not in out.stdout
