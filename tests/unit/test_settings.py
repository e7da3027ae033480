"""The settings registry owns every FEDHPC_* variable: nothing else in src/ reads one, the docs'
table is the registry's, and values are read when asked for (a monkeypatch is seen)."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fedhpc import settings
from fedhpc.errors import ValidationFailed
from fedhpc.settings.daemon import DaemonSettings
from fedhpc_dev import settings_docs

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"  # fedhpc and fedhpc_dev
REGISTRY = SRC / "fedhpc" / "settings"  # the registry and DaemonSettings
NAME = re.compile(r"FEDHPC_[A-Z0-9_]*")
# A string that is only a variable's name (or NAME=value, $NAME) is a use of it, not prose:
# any FEDHPC_ name, or one of the honoured variables the registry reads for fedhpc.
_HONOURED = "|".join(s.name for s in settings.OTHERS)
BARE = re.compile(rf"\s*\$?(FEDHPC_[A-Z0-9_]*|{_HONOURED})(=\S*)?\s*")


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def _is_environ(node: ast.expr) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "environ") or (
        isinstance(node, ast.Name) and node.id == "environ"
    )


def _env_read_key(node: ast.AST) -> ast.AST | None:
    """The key of `os.environ.get(k)`, `os.getenv(k)` or a read `os.environ[k]`, else None."""
    if isinstance(node, ast.Call) and node.args:
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "get" and _is_environ(func.value):
            return node.args[0]
        if (isinstance(func, ast.Attribute) and func.attr == "getenv") or (
            isinstance(func, ast.Name) and func.id == "getenv"
        ):
            return node.args[0]
    reading = isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load)
    if reading and isinstance(node, ast.Subscript) and _is_environ(node.value):
        return node.slice
    return None


def violations(source: str) -> list[str]:
    """Where `source` (a module outside the registry) names or reads a FEDHPC_* variable other
    than in prose: a bare name in a string, or an environment read keyed by a registry name."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docs
            and BARE.fullmatch(node.value)
        ):
            found.append(f"line {node.lineno}: {node.value!r} names a variable")
        key = _env_read_key(node)
        if key is not None and any(
            isinstance(n, ast.Attribute) and n.attr == "name" for n in ast.walk(key)
        ):
            # A subscript or a call: both are expressions, which carry a line.
            assert isinstance(node, ast.expr)
            found.append(f"line {node.lineno}: reads a setting around the registry")
    return found


def test_the_checker_catches_raw_reads_and_passes_prose() -> None:
    for raw in (
        'os.environ["FEDHPC_X"]',
        'os.environ.get("FEDHPC_X", "1")',
        'os.getenv("FEDHPC_X")',
        'x = {"FEDHPC_X": "1"}',
        'argv = ["env", "FEDHPC_X=1"]',
        'os.environ.get("NO_COLOR")',
        'env.get("GLOBUS_CLIENT_SECRET")',
        "os.environ.get(HOME.name)",
        "os.environ[settings.HOME.name]",
    ):
        assert violations(raw), raw
    prose = (
        '"""Reads `$FEDHPC_HOME`."""\n'
        'hint = "Set FEDHPC_MCP_TOKEN to a long random secret."\n'
        'print(f"export FEDHPC_DEVFED=1 FEDHPC_DEVFED_SSH_CONFIG={path}")\n'
        "env = {HOME.name: str(home)}\n"
        "os.environ[HOME.name] = str(home)\n"
        "token = MCP_TOKEN.read()\n"
    )
    assert violations(prose) == []


def test_no_module_outside_the_registry_reads_a_registered_variable() -> None:
    bad = {}
    for path in sorted(SRC.rglob("*")):
        if REGISTRY in path.parents or not path.is_file() or "__pycache__" in path.parts:
            continue
        text = path.read_text(errors="replace")
        if "FEDHPC_" not in text and not re.search(_HONOURED, text):
            continue
        if path.suffix == ".py":
            if found := violations(text):
                bad[str(path.relative_to(ROOT))] = found
        else:  # data files (profiles) may name one in a comment only
            lines = [ln for ln in text.splitlines() if "FEDHPC_" in ln]
            if [ln for ln in lines if not ln.lstrip().startswith("#")]:
                bad[str(path.relative_to(ROOT))] = lines
    assert bad == {}


def test_every_variable_the_code_and_docs_mention_is_registered() -> None:
    registered = {s.name for s in settings.SETTINGS}
    places = [*SRC.rglob("*.py"), *SRC.rglob("*.toml"), ROOT / "README.md", ROOT / "dev"]
    places += [*(ROOT / "docs").glob("*.md"), *(ROOT / "skills").rglob("*.md")]
    mentioned: dict[str, str] = {}
    for path in places:
        for name in re.findall(r"FEDHPC_[A-Z][A-Z0-9_]*", path.read_text()):
            mentioned.setdefault(name, str(path.relative_to(ROOT)))
    unknown = {n: where for n, where in mentioned.items() if n not in registered}
    assert unknown == {}


def test_the_docs_tables_are_the_registry() -> None:
    pages = {p: p.read_text() for p in sorted((ROOT / "docs").glob("*.md"))}
    generated = {p.name for p, text in pages.items() if settings_docs.BEGIN in text}
    assert {"settings.md", "continuation.md"} <= generated
    for page, text in pages.items():
        assert settings_docs.with_tables(text) == text, (
            f"run `python -m fedhpc_dev.settings_docs --write` ({page})"
        )
    every = pages[ROOT / "docs" / "settings.md"]
    assert all(f"| `{s.name}` |" in every for s in settings.SETTINGS)


def test_each_daemon_tunable_is_a_daemon_settings_field_with_the_registry_default() -> None:
    fields = DaemonSettings.model_fields
    tunables = [s for s in settings.SETTINGS if s.field]
    assert {s.field for s in tunables} == set(fields) - {"home"}
    for s in tunables:
        assert s.field is not None
        assert fields[s.field].default == s.default, s.name


def test_a_variable_set_after_import_is_seen(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(settings.HOME.name, str(tmp_path))
    monkeypatch.setenv(settings.SUBMITS_PER_CYCLE.name, "7")
    monkeypatch.delenv(settings.CYCLE_S.name, raising=False)
    got = DaemonSettings.from_env()
    assert (got.home, got.submits_per_cycle, got.cycle_s) == (tmp_path, 7, 10.0)
    assert settings.daemon_values({"FEDHPC_GRACE_S": "3", "OTHER": "x"}) == {"grace_s": "3"}


def test_a_bad_daemon_value_is_a_typed_error_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(settings.HOME.name, str(tmp_path))
    monkeypatch.setenv(settings.SUBMITS_PER_CYCLE.name, "abc")
    monkeypatch.setenv(settings.REFRESH_S.name, "-1")
    with pytest.raises(ValidationFailed) as caught:
        DaemonSettings.from_env()
    assert caught.value.code == "validation"
    assert [i.field for i in caught.value.issues] == [
        "FEDHPC_REFRESH_S",
        "FEDHPC_SUBMITS_PER_CYCLE",
    ]
    assert "'abc'" in caught.value.message and "FEDHPC_SUBMITS_PER_CYCLE" in caught.value.hint
    # A value given in code wins over the environment's, so the environment's is not blamed.
    assert DaemonSettings.from_env(refresh_s=5, submits_per_cycle=3).refresh_s == 5


def test_unset_empty_and_default_values_read_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(settings.DEVFED_DIR.name, raising=False)
    assert settings.DEVFED_DIR.read() is None
    assert settings.DEVFED_DIR.get() == "/var/tmp/fedhpc-devfed"
    monkeypatch.setenv(settings.DEVFED_DIR.name, "")
    assert settings.DEVFED_DIR.get() == ""  # set but empty stays empty, as os.environ.get did
    assert settings.CONTINUATION.get() is None or settings.CONTINUATION.read() is not None
    assert settings.LOG_LEVEL.get({}) == "WARNING"
    assert settings.lookup("FEDHPC_HOME") is settings.HOME
    with pytest.raises(KeyError, match="FEDHPC_NOPE"):
        settings.lookup("FEDHPC_NOPE")


def test_the_registry_loads_no_pydantic() -> None:
    """The local-process scheduler reads the registry on every command: it must stay light."""
    code = "import sys, fedhpc.settings; print('pydantic' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
