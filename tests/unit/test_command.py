"""Commands: quoting round-trips through a real shell, and batched probes split back apart."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from fedhpc.adapters.command import Command, batch, quote, shell_line, split_batch
from tests.injection_corpus import corpus


def test_quote_round_trips_the_injection_corpus_through_bash(canary_dir: Path) -> None:
    for hostile in [*corpus(canary_dir), "", "tab\there", "uni\u00e9\u2603", "\x1b[31m"]:
        out = subprocess.run(
            ["bash", "-c", f"printf %s {quote(hostile)}"],
            capture_output=True,
            cwd=canary_dir,
            check=True,
        )
        assert out.stdout.decode() == hostile


def test_quoted_text_never_starts_a_new_line(canary_dir: Path) -> None:
    for hostile in corpus(canary_dir):
        assert "\n" not in quote(hostile)
        assert "\r" not in quote(hostile)


def test_shell_line_and_env_assignments_reproduce_argv(canary_dir: Path) -> None:
    argv = ("printf", "%s|", *corpus(canary_dir)[:6])
    line = Command(argv).as_shell()
    out = subprocess.run(["bash", "-c", line], capture_output=True, cwd=canary_dir, check=True)
    assert out.stdout.decode() == "".join(f"{a}|" for a in argv[2:])
    hostile = corpus(canary_dir)[0]
    env_cmd = Command(("bash", "-c", 'printf %s "$V"'), env={"V": hostile})
    out = subprocess.run(
        ["bash", "-c", env_cmd.as_shell()], capture_output=True, cwd=canary_dir, check=True
    )
    assert out.stdout.decode() == hostile
    assert shell_line(["a b"]) == "'a b'"


def test_command_refuses_empty_argv_and_nul() -> None:
    with pytest.raises(ValueError, match="at least one"):
        Command(())
    with pytest.raises(ValueError, match="NUL"):
        Command(("echo", "a\x00b"))


def test_batch_runs_every_section_once_and_splits_by_marker() -> None:
    cmd = batch(
        {
            "one": Command(("printf", "a\nb\n")),
            "two": Command(("sh", "-c", "echo err >&2; exit 3")),
            "three": Command(("echo", "@@ not a marker")),
        }
    )
    assert cmd.argv == ("bash", "-s")
    out = subprocess.run(
        list(cmd.argv), input=cmd.stdin, capture_output=True, text=True, check=True
    )
    sections = split_batch(out.stdout)
    assert sections["one"].stdout == "a\nb\n" and sections["one"].returncode == 0
    assert sections["two"].returncode == 3 and sections["two"].stdout == ""
    assert sections["three"].stdout == "@@ not a marker\n"


def test_batch_refuses_section_names_that_are_not_identifiers() -> None:
    with pytest.raises(ValueError, match="identifier"):
        batch({"a;b": Command(("true",))})
