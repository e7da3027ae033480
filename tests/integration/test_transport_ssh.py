"""SshTransport against a real sshd on loopback: round trips, master reuse, injection corpus."""

from __future__ import annotations

import getpass
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest

from fedhpc.adapters.command import Command
from fedhpc.adapters.transports import make_transport
from fedhpc.adapters.transports.base import TransportError, TransportUnavailable
from fedhpc.adapters.transports.ssh import SshTransport
from fedhpc.domain.site import TransportSpec
from tests.injection_corpus import CANARY_NAME, corpus

pytestmark = pytest.mark.sshd

SSHD = "/usr/sbin/sshd"


@dataclass(frozen=True)
class Sshd:
    port: int
    user: str
    client_key: Path
    known_hosts: Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_accepting(port: int, proc: subprocess.Popen[bytes], deadline_s: float) -> None:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
                if s.recv(4).startswith(b"SSH-"):
                    return
        except OSError:
            time.sleep(0.05)  # polling a foreign process: no event to wait on
    out = proc.stderr.read().decode() if proc.poll() is not None and proc.stderr else ""
    pytest.fail(f"sshd did not accept connections on 127.0.0.1:{port} in {deadline_s}s: {out}")


@pytest.fixture(scope="session")
def sshd() -> Iterator[Sshd]:
    """A real sshd on 127.0.0.1 that accepts only a freshly generated client key.

    Fails (never skips) when sshd cannot start: this suite is how CI proves the ssh path."""
    if not Path(SSHD).exists() or shutil.which("ssh-keygen") is None:
        pytest.fail("openssh-server/openssh-client are not installed (apt-get install them)")
    root = Path(tempfile.mkdtemp(prefix="fedhpc-sshd-"))
    user = getpass.getuser()
    host_key, client_key = root / "host_ed25519", root / "client_ed25519"
    for key in (host_key, client_key):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    (root / "authorized_keys").write_text(client_key.with_suffix(".pub").read_text())
    port = _free_port()
    host_pub = host_key.with_suffix(".pub").read_text().split()
    known_hosts = root / "known_hosts"
    known_hosts.write_text(f"[127.0.0.1]:{port} {host_pub[0]} {host_pub[1]}\n")
    config = root / "sshd_config"
    config.write_text(
        "\n".join(
            [
                "ListenAddress 127.0.0.1",
                f"Port {port}",
                f"HostKey {host_key}",
                f"PidFile {root / 'sshd.pid'}",
                f"AuthorizedKeysFile {root / 'authorized_keys'}",
                f"AllowUsers {user}",
                "PermitRootLogin prohibit-password" if user == "root" else "PermitRootLogin no",
                "PubkeyAuthentication yes",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                "StrictModes no",
                "UsePAM no",
                "MaxSessions 50",
                "MaxStartups 50",
                "LogLevel ERROR",
                "",
            ]
        )
    )
    if os.geteuid() == 0:
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege-separation dir
    proc = subprocess.Popen(
        [SSHD, "-D", "-e", "-f", str(config), "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        _wait_accepting(port, proc, deadline_s=10.0)
        yield Sshd(port=port, user=user, client_key=client_key, known_hosts=known_hosts)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stderr:
            proc.stderr.close()
        shutil.rmtree(root, ignore_errors=True)


def _spec(sshd: Sshd, **extra: str) -> TransportSpec:
    return TransportSpec(
        kind="ssh",
        host="127.0.0.1",
        user=sshd.user,
        env={"FEDHPC_SITE_VAR": "from-spec"},
        options={
            "port": str(sshd.port),
            "identity_file": str(sshd.client_key),
            "IdentitiesOnly": "yes",
            "UserKnownHostsFile": str(sshd.known_hosts),
            "StrictHostKeyChecking": "yes",
            "connect_timeout_s": "5",
            **extra,
        },
    )


@pytest.fixture
async def ssh(sshd: Sshd) -> AsyncIterator[SshTransport]:
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


async def test_closed_port_raises_transport_error_after_retries(sshd: Sshd) -> None:
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
    sshd: Sshd, tmp_path: Path
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
    assert "ControlPersist=yes -fN" in caught.value.hint
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
