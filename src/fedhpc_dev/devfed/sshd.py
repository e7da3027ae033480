"""An SSH front for the local test federation: one sshd on loopback, one login host per cluster.

A real center is reached as `ssh login.center.org`: the login host's own environment points
Slurm at its cluster, and the client sends nothing but the command line. The front reproduces
that on one machine. Every cluster gets its own loopback port and a Host alias in an ssh_config
(`Host devdelta` -> 127.0.0.1:<port>); the sshd picks that login's authorized_keys with
`Match LocalPort`, and the key's `environment="SLURM_CONF=..."` option (allowed by
`PermitUserEnvironment SLURM_CONF`) sets the login environment. fedhpc's transport sends no
SLURM_CONF: a command that works through the front works because of the login, as at a center.

Used by the integration tests (tests/integration/conftest.py), `fedhpc demo --ssh` and
`fedhpc devfed ssh`. See docs/devfed.md, "Reaching the clusters over SSH".
"""

from __future__ import annotations

import getpass
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Mapping
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from fedhpc.domain.site import SAFE_NAME
from fedhpc.settings import DEVFED_SSH_CONFIG, LOGIN
from fedhpc_dev.devfed import DevfedError

__all__ = [
    "SSHD",
    "SSH_CONFIG_ENV",
    "Login",
    "SshFront",
    "free_ports",
    "login_keys_line",
    "render_ssh_config",
    "render_sshd_config",
    "start_front",
]

log = structlog.get_logger(__name__)

SSHD = "/usr/sbin/sshd"
# The ssh_config whose Host entries name the devfed clusters reached over ssh
# (fedhpc_dev/profiles.py).
SSH_CONFIG_ENV = DEVFED_SSH_CONFIG.name
_LOGIN_ENV_KEYS = ("SLURM_CONF", LOGIN.name)  # what a login may set (PermitUserEnvironment)


@dataclass(frozen=True, slots=True)
class Login:
    """One login host of the front: its alias, port and login environment."""

    alias: str
    port: int
    env: Mapping[str, str]


def render_sshd_config(root: Path, user: str, logins: list[Login]) -> str:
    """sshd_config (pure): loopback only, key login only, one authorized_keys per login."""
    lines = [f"ListenAddress 127.0.0.1:{login.port}" for login in logins]
    lines += [
        f"HostKey {root / 'host_ed25519'}",
        f"PidFile {root / 'sshd.pid'}",
        "AuthorizedKeysFile none",  # only the Match blocks below grant a login
        f"AllowUsers {user}",
        "PermitRootLogin prohibit-password" if user == "root" else "PermitRootLogin no",
        "PubkeyAuthentication yes",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        f"PermitUserEnvironment {','.join(_LOGIN_ENV_KEYS)}",
        "StrictModes no",  # the folder lives under /tmp
        "UsePAM no",
        "MaxSessions 64",
        "MaxStartups 64",
        "LogLevel ERROR",
    ]
    for login in logins:
        lines += [
            f"Match LocalPort {login.port}",
            f"    AuthorizedKeysFile {root / 'logins' / login.alias / 'authorized_keys'}",
        ]
    return "\n".join(lines) + "\n"


def render_ssh_config(root: Path, user: str, logins: list[Login]) -> str:
    """The client side (pure): one Host alias per login, as a user's ~/.ssh/config has."""
    out = []
    for login in logins:
        out += [
            f"Host {login.alias}",
            "    HostName 127.0.0.1",
            f"    Port {login.port}",
            f"    User {user}",
            f"    IdentityFile {root / 'client_ed25519'}",
            "    IdentitiesOnly yes",
            f"    HostKeyAlias {login.alias}",
            f"    UserKnownHostsFile {root / 'known_hosts'}",
            "    StrictHostKeyChecking yes",
            "",
        ]
    return "\n".join(out)


def free_ports(count: int) -> list[int]:
    socks = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def _keygen(path: Path) -> None:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "fedhpc-devfed", "-f", str(path)],
        check=True,
        capture_output=True,
    )


def login_keys_line(env: Mapping[str, str], public_key: str) -> str:
    """One authorized_keys line: the login environment as `environment=` options, then the key."""
    for key, value in env.items():
        if key not in _LOGIN_ENV_KEYS or any(c in value for c in '",\n\\'):
            raise DevfedError(f"login environment {key}={value!r} cannot go in authorized_keys")
    options = ",".join(f'environment="{k}={v}"' for k, v in sorted(env.items()))
    return f"{options} {public_key}".strip() + "\n"


@dataclass
class SshFront:
    """A running sshd with one login per alias; `close()` stops it and removes its folder."""

    root: Path
    user: str
    logins: dict[str, Login]
    process: subprocess.Popen[bytes]
    keep_root: bool = False
    _revoked: set[str] = field(default_factory=set)

    @property
    def ssh_config(self) -> Path:
        return self.root / "ssh_config"

    @property
    def client_key(self) -> Path:
        return self.root / "client_ed25519"

    @property
    def known_hosts(self) -> Path:
        return self.root / "known_hosts"

    def port(self, alias: str) -> int:
        return self.logins[alias].port

    def env(self) -> dict[str, str]:
        """What makes fedhpc reach these clusters over ssh (with FEDHPC_DEVFED=1)."""
        return {SSH_CONFIG_ENV: str(self.ssh_config)}

    def _write_keys(self, alias: str) -> None:
        login = self.logins[alias]
        folder = self.root / "logins" / alias
        folder.mkdir(parents=True, exist_ok=True)
        pub = self.client_key.with_suffix(".pub").read_text().strip()
        line = "" if alias in self._revoked else login_keys_line(login.env, pub)
        tmp = folder / "authorized_keys.tmp"
        tmp.write_text(line)
        tmp.replace(folder / "authorized_keys")  # sshd reads it at every login: swap atomically

    def revoke(self, alias: str) -> None:
        """New logins to `alias` are refused (an open ControlMaster keeps working): what a
        center whose login needs a person (MFA) looks like once the master has expired."""
        self._revoked.add(alias)
        self._write_keys(alias)

    def grant(self, alias: str) -> None:
        """Undo `revoke`."""
        self._revoked.discard(alias)
        self._write_keys(alias)

    def alive(self) -> bool:
        return self.process.poll() is None

    def close(self) -> None:
        """Stop the sshd and the connections it serves (each runs in a session of its own and
        would outlive the listener, keeping ControlMasters open for their persist time), then
        remove the folder unless it was given to keep."""
        for pid in [*_children(self.process.pid), self.process.pid]:
            with suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if not self.keep_root:
            shutil.rmtree(self.root, ignore_errors=True)


def _children(pid: int) -> list[int]:
    """The direct children of `pid` (the sshd serving each connection), from /proc."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with suppress(OSError, ValueError, IndexError):
            # the command name may hold spaces and parentheses: the ppid follows the last ')'
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(stat.parent.name))
    return out


def _wait_accepting(front: SshFront, deadline_s: float) -> None:
    deadline = time.monotonic() + deadline_s
    pending = {login.port for login in front.logins.values()}
    while pending and time.monotonic() < deadline and front.alive():
        for port in sorted(pending):
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
                    if s.recv(4).startswith(b"SSH-"):
                        pending.discard(port)
            except OSError:
                time.sleep(0.05)  # polling a foreign process: there is no event to wait on
    if pending:
        err = (front.root / "sshd.log").read_bytes()[-2000:]
        front.close()
        raise DevfedError(
            f"sshd did not accept connections on 127.0.0.1:{sorted(pending)} within "
            f"{deadline_s:g}s: {err.decode(errors='replace').strip() or 'no message'}",
            hint="Install openssh-server, and run as root or as the user the logins are for.",
        )


def start_front(
    root: Path,
    logins: Mapping[str, Mapping[str, str]],
    *,
    keep_root: bool = False,
    timeout_s: float = 10.0,
) -> SshFront:
    """Start an sshd on 127.0.0.1 with one login per alias (alias -> login environment).

    `root` is made (0700) and holds keys, configs and the pid file. Raises DevfedError when
    OpenSSH is missing or sshd does not come up."""
    if not Path(SSHD).exists() or shutil.which("ssh-keygen") is None:
        raise DevfedError(
            "OpenSSH is not installed (no /usr/sbin/sshd or ssh-keygen)",
            hint="apt-get install openssh-server openssh-client",
        )
    for alias in logins:
        if not SAFE_NAME.match(alias):
            raise DevfedError(f"{alias!r} is not a plain host alias")
    user = getpass.getuser()
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    host_key, client_key = root / "host_ed25519", root / "client_ed25519"
    for key in (host_key, client_key):
        if not key.exists():
            _keygen(key)
    ports = free_ports(len(logins))
    table = [Login(a, p, dict(env)) for (a, env), p in zip(logins.items(), ports, strict=True)]
    host_pub = " ".join(host_key.with_suffix(".pub").read_text().split()[:2])
    names = [*(t.alias for t in table), *(f"[127.0.0.1]:{t.port}" for t in table)]
    (root / "known_hosts").write_text(f"{','.join(names)} {host_pub}\n")
    (root / "sshd_config").write_text(render_sshd_config(root, user, table))
    (root / "ssh_config").write_text(render_ssh_config(root, user, table))
    if os.geteuid() == 0:
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege-separation dir
    with (root / "sshd.log").open("ab") as sshd_log:  # a file, not a pipe nobody drains
        proc = subprocess.Popen(
            [SSHD, "-D", "-e", "-f", str(root / "sshd_config")],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=sshd_log,
        )
    front = SshFront(root, user, {t.alias: t for t in table}, proc, keep_root=keep_root)
    for alias in front.logins:
        front._write_keys(alias)
    _wait_accepting(front, timeout_s)
    log.info("devfed.sshd.up", pid=proc.pid, logins={t.alias: t.port for t in table})
    return front
