"""`run_lines` (local transport; tests/integration/test_transport_ssh.py over a real sshd): stdout
is handed on as it arrives, a read's worth of complete lines at a time, and never held whole."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from fedhpc.adapters.command import Command
from fedhpc.adapters.transports.base import LineTransport
from fedhpc.adapters.transports.local import (
    DEFAULT_LINE_LIMIT,
    LocalTransport,
    OutputTooLarge,
    TransportTimeout,
)
from tests.unit.test_transport_local import _alive


class Lines:
    """An `on_lines` that keeps every line and the largest list it was handed."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.most = 0
        self.calls = 0

    async def __call__(self, lines: list[str]) -> None:
        self.calls += 1
        self.most = max(self.most, len(lines))
        self.lines.extend(lines)


async def test_lines_are_handed_on_before_the_command_has_finished(tmp_path: Path) -> None:
    # The command writes two lines, then waits for the first of them to have been handed on:
    # a transport that read stdout whole first would wait for ever (here: fail_after).
    flag = tmp_path / "seen"
    script = f"printf 'first\\nsecond\\n'; while [ ! -e {flag} ]; do sleep 0.02; done; printf last"

    async def on_lines(lines: list[str]) -> None:
        got.append(lines)
        flag.touch()

    got: list[list[str]] = []
    transport = LocalTransport()
    assert isinstance(transport, LineTransport)
    with anyio.fail_after(10):
        result = await transport.run_lines(Command(("sh", "-c", script)), on_lines)
    assert result.ok and result.stdout == ""
    assert got[0] == ["first", "second"]  # one write of 13 bytes: one pipe read
    assert [line for batch in got for line in batch] == ["first", "second", "last"]


async def test_a_large_answer_comes_a_read_at_a_time_and_whole() -> None:
    # 200,000 lines (~2.7 MB of "ü" and digits): never more than one pipe read's lines at once,
    # every line whole (a character cut between two reads is joined again), none lost.
    seen = Lines()
    code = "import sys\nfor i in range(200000): sys.stdout.write(f'{i}|ü\\n')"
    with anyio.fail_after(30):
        result = await LocalTransport().run_lines(Command(("python3", "-c", code)), seen)
    assert result.ok
    assert len(seen.lines) == 200_000
    assert seen.lines[::49_999] == [f"{i}|ü" for i in range(0, 200_000, 49_999)]
    assert all(line.endswith("|ü") for line in seen.lines)
    shortest = len("0|ü\n".encode())  # a read is at most 64 KiB, plus the line it finished
    assert seen.calls > 20 and seen.most <= 65_536 // shortest + 1


async def test_a_line_longer_than_the_bound_raises_instead_of_being_held() -> None:
    seen = Lines()
    code = f"import sys; sys.stdout.write('ok\\n' + 'x' * {DEFAULT_LINE_LIMIT + 10})"
    with anyio.fail_after(20), pytest.raises(OutputTooLarge, match="a line longer than"):
        await LocalTransport().run_lines(Command(("python3", "-c", code)), seen)
    assert seen.lines == ["ok"]


async def test_an_error_in_on_lines_stops_the_command_and_is_raised_as_is(
    tmp_path: Path,
) -> None:
    pid_file = tmp_path / "pid"

    async def refuse(lines: list[str]) -> None:
        raise ValueError(f"not an answer: {lines[0]}")

    script = f"echo $$ > {pid_file}; echo garbage; exec sleep 30"
    with anyio.fail_after(10), pytest.raises(ValueError, match="not an answer: garbage"):
        await LocalTransport().run_lines(Command(("sh", "-c", script)), refuse)
    assert not _alive(int(pid_file.read_text()))


async def test_the_timeout_bounds_the_whole_read_and_a_failed_exit_is_a_result() -> None:
    seen = Lines()
    # 3 s: time for sh to start and its first line to be read on a loaded machine.
    slow = Command(("sh", "-c", "echo one; sleep 30"), timeout_s=3)
    with anyio.fail_after(20), pytest.raises(TransportTimeout):
        await LocalTransport().run_lines(slow, seen)
    assert seen.lines == ["one"]
    failed = Command(("sh", "-c", "echo row; echo 'sacct: error: no db' >&2; exit 1"))
    with anyio.fail_after(10):
        result = await LocalTransport().run_lines(failed, Lines())
    assert (result.returncode, result.stdout, result.stderr) == (1, "", "sacct: error: no db\n")
