"""`fedhpc.terminal.for_terminal`: what an agent, a site or a job wrote is shown on a person's
terminal with its control characters escaped, never interpreted (an OSC title, a clear
screen, a carriage return, a right-to-left override, a lone surrogate)."""

from __future__ import annotations

import argparse

import pytest

from fedhpc.cli.table import table_lines
from fedhpc.errors import UsageError
from fedhpc.exit_codes import run_command
from fedhpc.terminal import for_terminal

HOSTILE = "a\x1b]0;owned\x07b\x1b[2Jc\rd\u202ee\x9bf\ud800g\u2028h\x00"


def test_every_control_format_and_surrogate_character_is_shown_escaped() -> None:
    shown = for_terminal(HOSTILE)
    assert shown == ("a\\x1b]0;owned\\x07b\\x1b[2Jc\\rd\\u202ee\\x9bf\\ud800g\\u2028h\\x00")
    assert shown.isprintable()
    shown.encode("utf-8")  # a lone surrogate no longer stops print()


def test_lines_keep_newlines_and_tabs_and_plain_text_is_unchanged() -> None:
    assert for_terminal("a\n\tb\x1b", lines=True) == "a\n\tb\\x1b"
    assert for_terminal("a\n\tb") == "a\\n\\tb"
    for plain in ("", "ok 8 x A100: \u4e2d\u6587 \u00e9", "path/with spaces"):
        assert for_terminal(plain) == plain


def test_a_table_cell_cannot_move_the_cursor() -> None:
    lines = table_lines([("NAME", "STATE"), (HOSTILE, "failed")])
    assert all(line.isprintable() for line in lines)
    assert lines[1].endswith("failed") and len(lines[0].split("STATE")[0]) == len(
        lines[1].split("failed")[0]
    )


def test_a_cli_error_quoting_agent_text_is_printed_escaped(
    capsys: pytest.CaptureFixture[str],
) -> None:
    def fail(_: argparse.Namespace) -> int:
        raise UsageError(f"no task {HOSTILE!s}", hint=f"try \x1b[2J{HOSTILE}")

    assert run_command(argparse.Namespace(func=fail)) == 2
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\\x1b]0;owned\\x07" in err and err.count("\n") == 2
