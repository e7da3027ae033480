"""Run commands at a site through the system `ssh` client, multiplexed over a ControlMaster socket.

Why the system client and not asyncssh: HPC centers require MFA (Duo, TOTP) at login. The user
authenticates once, interactively, and a ControlMaster socket with ControlPersist keeps that session
open; every fedhpc call then rides the socket with `BatchMode=yes` and never prompts. The system
client also honours the user's ~/.ssh/config (Host aliases, ProxyJump, certificates, ssh-agent),
which a library client would have to re-implement and could not authenticate non-interactively.

The remote sshd hands the command line to the remote user's login shell, so the line is built by
`Command.as_shell()`, which quotes every argv element and env value: agent text stays data. The
login shell must be POSIX-like (bash, zsh, ksh, sh); csh/tcsh reject quoted newlines.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import shutil
import stat
import tempfile
from pathlib import Path

import structlog

from fedhpc.adapters.command import Command, CommandResult
from fedhpc.adapters.transports.base import (
    TransportError,
    TransportMisconfigured,
    TransportUnavailable,
)
from fedhpc.adapters.transports.local import (
    DEFAULT_ATTEMPTS,
    DEFAULT_OUTPUT_LIMIT,
    OnLines,
    int_option,
    retrying,
    run_bounded,
    stream_bounded,
)
from fedhpc.domain.site import TransportSpec

__all__ = ["ALLOWED_SSH_OPTIONS", "OWN_KEY_FOR", "SshTransport", "control_dir", "refused_option"]

log = structlog.get_logger(__name__)

# ssh -o options a site profile may set. Anything that runs a local command (ProxyCommand,
# LocalCommand, KnownHostsCommand, Match exec) or changes multiplexing is deliberately absent.
ALLOWED_SSH_OPTIONS = frozenset(
    {
        "AddressFamily",
        "CertificateFile",
        "Ciphers",
        "Compression",
        "ControlPath",
        "GlobalKnownHostsFile",
        "HostKeyAlias",
        "IdentitiesOnly",
        "LogLevel",
        "ProxyJump",
        "ServerAliveCountMax",
        "ServerAliveInterval",
        "StrictHostKeyChecking",
        "UserKnownHostsFile",
    }
)
# fedhpc's own option keys (not ssh's): see docs/transports.md.
_OWN_OPTIONS = frozenset(
    {
        "attempts",
        "config_file",
        "connect_timeout_s",
        "control_persist_s",
        "identity_file",
        "output_limit_bytes",
        "port",
    }
)
_SAFE_VALUE = re.compile(r"^[A-Za-z0-9_.,:@%/~+=\[\]-]+$")
_SAFE_HOST = re.compile(r"^[A-Za-z0-9_.:%\[\]][A-Za-z0-9_.:%\[\]-]*$")
_SAFE_USER = re.compile(r"^[A-Za-z0-9_.][A-Za-z0-9_.-]*$")
_SOCKET_PATH_MAX = 100  # sun_path is 108 bytes; ssh appends a 17-byte suffix while binding
_CONNECTION_FAILED = 255
_PERMANENT_MARKERS = (
    "Permission denied",
    "Host key verification failed",
    "Too many authentication failures",
)


# ssh options people reach for that fedhpc sets through a key of its own (or refuses).
OWN_KEY_FOR = {
    "IdentityFile": "identity_file",
    "Port": "port",
    "ConnectTimeout": "connect_timeout_s",
    "ControlPersist": "control_persist_s",
    "ConnectionAttempts": "attempts",
}
_FIELD_FOR = {"HostName": "host", "User": "user"}
_REFUSED_WHY = {
    "ProxyCommand": "it runs a local command; use ProxyJump, or a Host entry in your ssh config",
    "LocalCommand": "it runs a local command",
    "PermitLocalCommand": "it runs a local command",
    "KnownHostsCommand": "it runs a local command; use UserKnownHostsFile",
    "ControlMaster": "fedhpc manages multiplexing itself (ControlMaster=auto)",
    "BatchMode": "fedhpc always sets BatchMode=yes: a prompt would hang the daemon",
}


def _unavailable(reason: str, key: str) -> TransportMisconfigured:
    return TransportMisconfigured(reason, hint=f"Fix '{key}' in the site's [transport] settings.")


def refused_option(key: str, site: str) -> TransportMisconfigured:
    """The error for an ssh option fedhpc does not pass through, naming what to use instead."""
    where = f"[sites.{site}.transport.options] in config.toml, or the profile's [transport]"
    if key in OWN_KEY_FOR:
        own = OWN_KEY_FOR[key]
        return TransportMisconfigured(
            f"{site}: ssh option {key!r} is not allowed in [transport] options; fedhpc's own "
            f"key for it is {own!r}",
            hint=f'Write {own} = "..." instead of {key} in {where}. fedhpc\'s own keys: '
            f"{', '.join(sorted(_OWN_OPTIONS))}; ssh -o options passed through: "
            f"{', '.join(sorted(ALLOWED_SSH_OPTIONS))} (docs/transports.md).",
        )
    if key in _FIELD_FOR:
        field = _FIELD_FOR[key]
        return TransportMisconfigured(
            f"{site}: ssh option {key!r} is not allowed in [transport] options; it is the "
            f"transport's own field {field!r}",
            hint=f'Set {field} = "..." in [transport] (not in options), in {where}.',
        )
    why = _REFUSED_WHY.get(key, "it is not one fedhpc passes to ssh")
    return TransportMisconfigured(
        f"{site}: ssh option {key!r} is not allowed ({why})",
        hint=f"Remove it from {where}; put anything else in a Host entry of your ssh config "
        f"(~/.ssh/config, or the file named by config_file). fedhpc's own keys: "
        f"{', '.join(sorted(_OWN_OPTIONS))}; ssh -o options passed through: "
        f"{', '.join(sorted(ALLOWED_SSH_OPTIONS))} (docs/transports.md).",
    )


def _check_value(key: str, value: str) -> str:
    if not _SAFE_VALUE.match(value) or value.startswith("-"):
        raise _unavailable(f"ssh option {key} has an unsafe value", key)
    return value


def control_dir(state_dir: Path) -> Path:
    """Where ControlMaster sockets live: <state>/ssh, or a private /tmp folder when that path is
    too long for a unix socket."""
    preferred = state_dir / "ssh"
    if len(str(preferred)) + 1 + 40 + 17 <= _SOCKET_PATH_MAX:  # "/" + %C (40 hex) + bind suffix
        preferred.mkdir(parents=True, exist_ok=True, mode=0o700)
        return preferred
    digest = hashlib.sha256(str(state_dir).encode()).hexdigest()[:12]
    short = Path(tempfile.gettempdir()) / f"fedhpc-ssh-{os.getuid()}-{digest}"
    short.mkdir(mode=0o700, exist_ok=True)
    info = short.lstat()
    # /tmp is shared: refuse a folder someone else made or could write into.
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise TransportUnavailable(
            f"{short} is not a private folder owned by this user",
            hint=f"Remove {short}, or use a shorter FEDHPC_HOME.",
        )
    return short


class SshTransport:
    """Runs commands at one login host with `ssh -o BatchMode=yes` over a ControlMaster socket."""

    def __init__(self, spec: TransportSpec, *, state_dir: Path, name: str | None = None) -> None:
        if not spec.host:
            raise _unavailable("an ssh transport needs a host", "host")
        if not _SAFE_HOST.match(spec.host):
            raise _unavailable(f"ssh host {spec.host!r} is not a plain host name or alias", "host")
        if spec.user is not None and not _SAFE_USER.match(spec.user):
            raise _unavailable(f"ssh user {spec.user!r} is not a plain user name", "user")
        self._ssh = shutil.which("ssh")
        if self._ssh is None:
            raise TransportUnavailable(
                "the ssh client is not installed", hint="Install OpenSSH (package openssh-client)."
            )
        self.name = name or spec.host
        self._env = dict(spec.env)
        opts = spec.options
        self._attempts = int_option(opts, "attempts", DEFAULT_ATTEMPTS)
        self._output_limit = int_option(opts, "output_limit_bytes", DEFAULT_OUTPUT_LIMIT)
        self._extra = extra = self._options(spec, self.name)  # validated before any disk I/O
        self.control_path = (
            _check_value("ControlPath", opts["ControlPath"])
            if "ControlPath" in opts
            else str(control_dir(state_dir) / "%C")
        )
        self.destination = f"{spec.user}@{spec.host}" if spec.user else spec.host
        self._base = [
            str(self._ssh),
            "-o",
            "BatchMode=yes",
            "-o",
            "ControlMaster=auto",
            "-o",
            f"ControlPath={self.control_path}",
            "-o",
            f"ControlPersist={int_option(opts, 'control_persist_s', 600)}",
            "-o",
            f"ConnectTimeout={int_option(opts, 'connect_timeout_s', 10)}",
            *extra,
        ]

    @staticmethod
    def _options(spec: TransportSpec, site: str) -> list[str]:
        opts = spec.options
        argv: list[str] = []
        if "config_file" in opts:
            argv += ["-F", _check_value("config_file", opts["config_file"])]
        if "port" in opts:
            argv += ["-p", str(int_option(opts, "port", 22))]
        if "identity_file" in opts:
            argv += ["-i", _check_value("identity_file", opts["identity_file"])]
        for key, value in sorted(opts.items()):
            if key in _OWN_OPTIONS or key == "ControlPath":
                continue
            if key not in ALLOWED_SSH_OPTIONS:
                raise refused_option(key, site)
            argv += ["-o", f"{key}={_check_value(key, value)}"]
        int_option(opts, "control_persist_s", 600)
        int_option(opts, "connect_timeout_s", 10)
        return argv

    def argv_for(self, command: Command) -> list[str]:
        """The full local argv: ssh options, destination, `--`, then one quoted remote line."""
        remote = Command(command.argv, env={**self._env, **command.env}).as_shell()
        return [*self._base, self.destination, "--", remote]

    def open_argv(self) -> list[str]:
        """The command a person runs once to open this site's master (it may prompt for a
        password and MFA, then stays in the background for fedhpc's calls to ride on)."""
        return [
            "ssh",
            "-o",
            "ControlMaster=auto",
            "-o",
            f"ControlPath={self.control_path}",
            "-o",
            "ControlPersist=yes",
            *self._extra,
            "-fN",
            self.destination,
        ]

    def control_argv(self, operation: str) -> list[str]:
        """`ssh -O <operation>` against this site's master (check, exit, stop)."""
        return [*self._base, "-O", operation, self.destination]

    async def run(self, command: Command) -> CommandResult:
        return await retrying(command, self._run_once, attempts=self._attempts)

    async def run_lines(self, command: Command, on_lines: OnLines) -> CommandResult:
        return await self._run_once(command, on_lines)  # never retried: see LineTransport

    async def _run_once(self, command: Command, on_lines: OnLines | None = None) -> CommandResult:
        stdin = command.stdin.encode("utf-8") if command.stdin is not None else None
        argv = self.argv_for(command)
        # The local ssh keeps the user's environment (SSH_AUTH_SOCK, HOME): env=None.
        if on_lines is None:
            outcome = await run_bounded(
                argv,
                stdin=stdin,
                env=None,
                timeout_s=command.timeout_s,
                output_limit=self._output_limit,
            )
        else:
            outcome = await stream_bounded(
                argv,
                stdin=stdin,
                env=None,
                timeout_s=command.timeout_s,
                on_lines=on_lines,
                output_limit=self._output_limit,
            )
        result = outcome.as_result()
        if result.returncode == _CONNECTION_FAILED:
            # ssh reserves 255 for its own failures. A remote command exiting 255 looks the same;
            # that ambiguity is inherent to ssh and documented.
            detail = result.stderr.strip().splitlines()[-1:] or ["no message"]
            if any(marker in result.stderr for marker in _PERMANENT_MARKERS):
                # No master (never opened, or expired) and the login needs a person.
                raise TransportUnavailable(
                    f"ssh to {self.destination} was refused: {detail[0]}",
                    hint=(
                        f"The login to {self.name} needs a person (password, MFA) and no open "
                        f"session was found. Run `fedhpc connect {self.name}` in a terminal, or "
                        f"open the session yourself: {shlex.join(self.open_argv())}"
                    ),
                )
            raise TransportError(f"ssh to {self.destination} failed: {detail[0]}")
        log.debug("transport.ssh.ran", site=self.name, argv0=command.argv[0], rc=result.returncode)
        return result

    async def aclose(self) -> None:
        # The master outlives us on purpose (ControlPersist): it holds the user's MFA session.
        return None
