"""SshTransport against a real sshd on loopback: round trips, master reuse, injection corpus."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from fedhpc.adapters.command import Command
from fedhpc.adapters.transports import make_transport
from fedhpc.adapters.transports.base import (
    LineTransport,
    TransportError,
    TransportUnavailable,
)
from fedhpc.adapters.transports.ssh import SshTransport
from fedhpc.domain.site import TransportSpec
from fedhpc_dev.devfed.sshd import SshFront, free_ports
from tests.injection_corpus import CANARY_NAME, corpus

pytestmark = pytest.mark.sshd


def _free_port() -> int:
    return free_ports(1)[0]


def _spec(sshd: SshFront, **extra: str) -> TransportSpec:
    return TransportSpec(
        kind="ssh",
        host="127.0.0.1",
        user=sshd.user,
        env={"FEDHPC_SITE_VAR": "from-spec"},
        options={
            "port": str(sshd.port("loopback")),
            "identity_file": str(sshd.client_key),
            "IdentitiesOnly": "yes",
            "UserKnownHostsFile": str(sshd.known_hosts),
            "StrictHostKeyChecking": "yes",
            "connect_timeout_s": "5",
            **extra,
        },
    )


@pytest.fixture
async def ssh(sshd: SshFront) -> AsyncIterator[SshTransport]:
    # A short state dir so the ControlPath fits a unix socket path; stop the master afterwards.
    state = Path(tempfile.mkdtemp(prefix="fedhpc-st-"))
    transport = make_transport(_spec(sshd), state_dir=state)
    assert isinstance(transport, SshTransport)
    yield transport
    await transport.aclose()
    with anyio.fail_after(10):
        await anyio.run_process(transport.control_argv("exit"), check=False)
    shutil.rmtree(state, ignore_errors=True)


async def test_echo_round_trips_through_sshd(ssh: SshTransport) -> None:
    with anyio.fail_after(30):
        result = await ssh.run(Command(("echo", "hello", "world")))
    assert result.returncode == 0
    assert result.stdout == "hello world\n"


async def test_stdin_reaches_the_remote_command(ssh: SshTransport) -> None:
    with anyio.fail_after(30):
        result = await ssh.run(Command(("cat",), stdin="line one\nline two"))
    assert result.stdout == "line one\nline two"


async def test_spec_and_command_env_reach_the_remote_side(ssh: SshTransport) -> None:
    cmd = Command(
        ("sh", "-c", 'printf "%s|%s" "$FEDHPC_SITE_VAR" "$FEDHPC_CMD_VAR"'),
        env={"FEDHPC_CMD_VAR": "from-command"},
    )
    with anyio.fail_after(30):
        result = await ssh.run(cmd)
    assert result.stdout == "from-spec|from-command"


async def test_non_zero_exit_is_a_result(ssh: SshTransport) -> None:
    with anyio.fail_after(30):
        result = await ssh.run(Command(("sh", "-c", "echo oops >&2; exit 7")))
    assert (result.returncode, result.stderr) == (7, "oops\n")


async def test_run_lines_streams_a_large_answer_through_sshd(
    ssh: SshTransport, tmp_path: Path
) -> None:
    # The first lines arrive while the remote command still runs (it waits for them to have
    # been handed on), then 100,000 more, never more than one read's worth at once.
    flag = tmp_path / "seen"
    script = f"echo first; while [ ! -e {flag} ]; do sleep 0.02; done; seq 1 100000; exit 3"
    batches: list[int] = []
    lines: list[str] = []

    async def on_lines(got: list[str]) -> None:
        flag.touch()
        batches.append(len(got))
        lines.extend(got)

    assert isinstance(ssh, LineTransport)
    with anyio.fail_after(60):
        result = await ssh.run_lines(Command(("sh", "-c", script)), on_lines)
    assert (result.returncode, result.stdout) == (3, "")  # a failed exit is still a result
    assert lines == ["first", *(str(i) for i in range(1, 100_001))]
    assert len(batches) > 5 and max(batches) <= 65_536 // 2 + 1


async def test_closed_port_raises_transport_error_after_retries(sshd: SshFront) -> None:
    state = Path(tempfile.mkdtemp(prefix="fedhpc-st-"))
    spec = _spec(sshd, port=str(_free_port()), attempts="2", connect_timeout_s="2")
    transport = make_transport(spec, state_dir=state)
    started = time.monotonic()
    with anyio.fail_after(30), pytest.raises(TransportError) as caught:
        await transport.run(Command(("true",)))
    assert caught.value.code == "transport"
    assert "Connection refused" in caught.value.message
    assert time.monotonic() - started >= 0.2  # waited for one backoff, so it did retry
    shutil.rmtree(state, ignore_errors=True)


async def test_second_call_reuses_the_control_master(ssh: SshTransport) -> None:
    with anyio.fail_after(30):
        first = await ssh.run(Command(("sh", "-c", "echo $PPID")))
    with anyio.fail_after(10):
        check = await anyio.run_process(ssh.control_argv("check"), check=False)
    assert check.returncode == 0, check.stderr
    assert b"Master running" in check.stderr
    master_pid = check.stderr.decode().split("pid=")[1].split(")")[0]
    with anyio.fail_after(30):
        second = await ssh.run(Command(("true",)))
    assert first.ok and second.ok
    with anyio.fail_after(10):
        again = await anyio.run_process(ssh.control_argv("check"), check=False)
    assert f"pid={master_pid})" in again.stderr.decode()


async def test_injection_corpus_round_trips_as_argv_unexecuted(
    ssh: SshTransport, canary_dir: Path
) -> None:
    strings = corpus(canary_dir)
    with anyio.fail_after(60):
        result = await ssh.run(Command(("printf", "%s\n", *strings)))
    assert result.stdout == "".join(f"{s}\n" for s in strings)
    assert not (canary_dir / CANARY_NAME).exists()


async def test_injection_corpus_round_trips_as_env_values_and_stdin(
    ssh: SshTransport, canary_dir: Path
) -> None:
    with anyio.fail_after(120):
        for s in corpus(canary_dir):
            via_env = await ssh.run(Command(("sh", "-c", 'printf "%s" "$EVIL"'), env={"EVIL": s}))
            assert via_env.stdout == s
            via_stdin = await ssh.run(Command(("cat",), stdin=s))
            assert via_stdin.stdout == s
    assert not (canary_dir / CANARY_NAME).exists()


async def test_a_refused_key_raises_transport_unavailable_with_the_master_hint(
    sshd: SshFront, tmp_path: Path
) -> None:
    stranger = tmp_path / "stranger_ed25519"
    with anyio.fail_after(10):
        await anyio.run_process(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)]
        )
    state = Path(tempfile.mkdtemp(prefix="fedhpc-st-"))
    transport = make_transport(_spec(sshd, identity_file=str(stranger)), state_dir=state)
    with anyio.fail_after(30), pytest.raises(TransportUnavailable) as caught:
        await transport.run(Command(("true",)))
    assert caught.value.code == "transport_unavailable"
    assert "-o ControlPersist=yes" in caught.value.hint
    assert caught.value.hint.endswith(f"-fN {sshd.user}@127.0.0.1")
    shutil.rmtree(state, ignore_errors=True)


def test_the_ssh_argv_is_batch_mode_multiplexed_and_ends_with_one_quoted_line(
    tmp_path: Path,
) -> None:
    spec = TransportSpec(
        kind="ssh",
        host="login.example.org",
        user="alice",
        env={"A": "x y"},
        options={
            "port": "2222",
            "ProxyJump": "bastion.example.org",
            "ControlPath": f"{tmp_path}/%C",
        },
    )
    transport = SshTransport(spec, state_dir=tmp_path)
    argv = transport.argv_for(Command(("echo", "$(id)"), env={"B": "'q'"}))
    assert argv[argv.index("-p") + 1] == "2222"
    for option in ("BatchMode=yes", "ControlMaster=auto", "ProxyJump=bastion.example.org"):
        assert option in argv
    assert argv[-3:] == [
        "alice@login.example.org",
        "--",
        "A='x y' B=''\"'\"'q'\"'\"'' echo '$(id)'",
    ]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("options", {"ProxyCommand": "touch /tmp/x"}),
        ("options", {"LocalCommand": "touch /tmp/x"}),
        ("options", {"ProxyJump": "-oProxyCommand=touch"}),
        ("options", {"UserKnownHostsFile": "/a b"}),
        ("host", "-oProxyCommand=touch"),
        ("user", "-l"),
        ("options", {"port": "twenty-two"}),
    ],
)
def test_unsafe_or_unknown_ssh_settings_are_refused(
    tmp_path: Path, field: str, value: object
) -> None:
    fields: dict[str, object] = {"kind": "ssh", "host": "login.example.org", field: value}
    with pytest.raises(TransportUnavailable):
        SshTransport(TransportSpec.model_validate(fields), state_dir=tmp_path)


def test_a_long_state_dir_falls_back_to_a_private_short_socket_folder(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 80)
    transport = SshTransport(TransportSpec(kind="ssh", host="h"), state_dir=deep)
    folder = Path(transport.control_path).parent
    assert len(transport.control_path) + 17 <= 104
    assert folder.stat().st_mode & 0o077 == 0
    assert folder.stat().st_uid == os.getuid()
    shutil.rmtree(folder)
