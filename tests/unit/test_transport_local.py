"""LocalTransport and the rules every transport shares (bounded output, timeouts, retries)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import anyio
import pytest

from fedhpc.adapters.command import Command
from fedhpc.adapters.transports import make_transport
from fedhpc.adapters.transports.base import Transport, TransportError
from fedhpc.adapters.transports.local import LocalTransport, OutputTooLarge, TransportTimeout
from fedhpc.adapters.transports.ssh import SshTransport
from fedhpc.domain.site import TransportSpec
from tests.injection_corpus import CANARY_NAME, corpus


def _script(path: Path, body: str) -> Path:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")  # a killed orphan may linger as a zombie of pid 1


@pytest.fixture
def local(tmp_path: Path) -> Transport:
    return make_transport(TransportSpec(kind="local"), state_dir=tmp_path)


async def test_argv_reaches_the_process_exactly_and_never_through_a_shell(
    local: Transport, canary_dir: Path
) -> None:
    strings = corpus(canary_dir)
    with anyio.fail_after(10):
        result = await local.run(Command(("printf", "%s\n", *strings)))
    assert result.stdout == "".join(f"{s}\n" for s in strings)
    assert not (canary_dir / CANARY_NAME).exists()


async def test_stdin_is_fed_to_the_process(local: Transport) -> None:
    text = "first line\nsecond ünïcode line\n" * 10_000  # larger than one pipe buffer
    with anyio.fail_after(10):
        result = await local.run(Command(("cat",), stdin=text))
    assert result.stdout == text


async def test_env_is_os_environ_then_spec_env_then_command_env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FEDHPC_FROM_OS", "os")
    monkeypatch.setenv("FEDHPC_OVERRIDDEN", "os")
    spec = TransportSpec(
        kind="local", env={"FEDHPC_FROM_SPEC": "spec", "FEDHPC_OVERRIDDEN": "spec"}
    )
    transport = make_transport(spec, state_dir=tmp_path)
    cmd = Command(
        (
            "sh",
            "-c",
            'printf "%s %s %s" "$FEDHPC_FROM_OS" "$FEDHPC_FROM_SPEC" "$FEDHPC_OVERRIDDEN"',
        ),
        env={"FEDHPC_OVERRIDDEN": "command"},
    )
    with anyio.fail_after(10):
        result = await transport.run(cmd)
    assert result.stdout == "os spec command"


async def test_non_zero_exit_is_a_result_not_an_error(local: Transport) -> None:
    with anyio.fail_after(10):
        result = await local.run(Command(("sh", "-c", "echo out; echo err >&2; exit 5")))
    assert (result.returncode, result.stdout, result.stderr, result.ok) == (
        5,
        "out\n",
        "err\n",
        False,
    )


async def test_a_missing_program_is_exit_127_like_a_remote_shell(local: Transport) -> None:
    with anyio.fail_after(10):
        result = await local.run(Command(("fedhpc-no-such-program-xyz",)))
    assert result.returncode == 127


async def test_timeout_raises_transport_error_and_kills_the_whole_process_group(
    local: Transport, tmp_path: Path
) -> None:
    pids = tmp_path / "pids"
    cmd = Command(
        ("sh", "-c", f'sleep 60 & echo "$$ $!" > {pids}; wait'),
        timeout_s=0.5,
        idempotent=True,
    )
    with anyio.fail_after(10), pytest.raises(TransportError) as caught:
        await local.run(cmd)
    assert isinstance(caught.value, TransportTimeout)
    assert caught.value.code == "transport_timeout"
    shell, child = (int(p) for p in pids.read_text().split())
    with anyio.fail_after(5):
        while _alive(shell) or _alive(child):  # SIGKILL was sent; no event tells us it landed
            await anyio.sleep(0.01)


async def test_a_timed_out_command_is_not_retried_even_when_idempotent(
    local: Transport, tmp_path: Path
) -> None:
    starts = tmp_path / "starts"
    cmd = Command(("sh", "-c", f"echo x >> {starts}; sleep 60"), timeout_s=0.3)
    with anyio.fail_after(10), pytest.raises(TransportTimeout):
        await local.run(cmd)
    assert starts.read_text().count("x") == 1


async def test_output_beyond_the_bound_raises_instead_of_truncating() -> None:
    transport = LocalTransport(output_limit=100_000)
    with anyio.fail_after(10), pytest.raises(OutputTooLarge) as caught:
        await transport.run(Command(("yes",)))
    assert caught.value.code == "output_too_large"


# --- the retry rule, driven by a real failing program ----------------------------------------
# A stand-in `ssh` on PATH exits 255 (ssh's own failure status) the first time it runs, the way a
# dropped connection does, then succeeds: the SshTransport's mapping and the shared retry rule
# run for real, no mocks.


@pytest.fixture
def flaky_ssh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    counter = tmp_path / "attempts"
    _script(
        bin_dir / "ssh",
        f"echo x >> {counter}\n"
        f'if [ "$(wc -l < {counter})" -eq 1 ]; then\n'
        '  echo "ssh: connect to host site port 22: Connection reset" >&2; exit 255\n'
        "fi\n"
        "echo connected\n",
    )
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return counter


def _ssh(tmp_path: Path) -> SshTransport:
    spec = TransportSpec(
        kind="ssh",
        host="site.example.org",
        user="alice",
        options={"ControlPath": f"{tmp_path}/%C"},
    )
    return SshTransport(spec, state_dir=tmp_path / "state")


async def test_a_transport_error_is_retried_for_an_idempotent_command(
    flaky_ssh: Path, tmp_path: Path
) -> None:
    with anyio.fail_after(10):
        result = await _ssh(tmp_path).run(Command(("true",), idempotent=True))
    assert result.stdout == "connected\n"
    assert flaky_ssh.read_text().count("x") == 2


async def test_a_transport_error_is_not_retried_for_a_non_idempotent_command(
    flaky_ssh: Path, tmp_path: Path
) -> None:
    with anyio.fail_after(10), pytest.raises(TransportError) as caught:
        await _ssh(tmp_path).run(Command(("sbatch", "job.sh"), idempotent=False))
    assert caught.value.code == "transport"
    assert "Connection reset" in caught.value.message
    assert flaky_ssh.read_text().count("x") == 1
