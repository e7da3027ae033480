"""The import rules: layers (domain <- placement <- services <- daemon <- faces) and no runtime
module imports the development tooling, as import-linter contracts in pyproject.toml. Type-only
imports under `TYPE_CHECKING` do not count."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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
