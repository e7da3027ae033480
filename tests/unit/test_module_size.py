"""No module under src/ is over 400 lines (STYLE.md habit 13: split by responsibility past it)."""

from __future__ import annotations

from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"
LIMIT = 400


def test_no_module_is_over_400_lines() -> None:
    modules = sorted(SRC.rglob("*.py"))
    assert len(modules) > 100  # both packages were found
    over = {
        str(p.relative_to(SRC)): n
        for p in modules
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > LIMIT
    }
    assert over == {}, f"split these by responsibility (STYLE.md, habit 13): {over}"
