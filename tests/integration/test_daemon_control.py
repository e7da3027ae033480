"""`fedhpc daemon restart` and `fedhpc daemon stop`: a person never has to find a pid. The
daemon they start (as every client's autostart does, `start_daemon`) is `python -m
fedhpc.daemon`, not the CLI again; with `[service.facade]` in the config that process
re-executes as `fedhpc.service.daemon` (same pid), the daemon holding each person's tokens."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from fedhpc.cli.daemon import stop_daemon
from fedhpc.settings.daemon import DaemonSettings
from tests.integration.oidc_support import Provider, facade_config

VENV_BIN = str(Path(sys.executable).parent)


def _fedhpc(home: Path, *argv: str, **extra: str) -> subprocess.CompletedProcess[str]:
    env = {
        **extra,
        "PATH": "/usr/bin:/bin",
        "HOME": str(home),
        "FEDHPC_HOME": str(home / "fed"),
        "FEDHPC_DEVFED": "process",
        "FEDHPC_DEVFED_DIR": str(home / "devfed"),
    }
    return subprocess.run(
        [f"{VENV_BIN}/fedhpc", *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_restart_starts_or_replaces_the_daemon_and_stop_ends_it(tmp_path: Path) -> None:
    settings = DaemonSettings.from_env(home=tmp_path / "fed")
    try:
        first = _fedhpc(tmp_path, "daemon", "restart")
        assert first.returncode == 0, first.stderr
        assert "no daemon ran" in first.stdout and "started the daemon (pid" in first.stdout
        pid1 = int(settings.lock_path.read_text().split()[0])
        assert _argv(pid1)[1:3] == ["-m", "fedhpc.daemon"]  # started lean, not via the CLI
        assert not (settings.home / "facade").exists()
        again = _fedhpc(tmp_path, "daemon", "restart")
        assert again.returncode == 0, again.stderr
        assert f"stopped the daemon (pid {pid1})" in again.stdout
        pid2 = int(settings.lock_path.read_text().split()[0])
        assert pid2 != pid1
        # a second `fedhpc daemon` is refused, and says how to stop the first
        dup = _fedhpc(tmp_path, "daemon")
        assert dup.returncode != 0
        assert "fedhpc daemon stop" in dup.stderr + dup.stdout
        done = _fedhpc(tmp_path, "daemon", "stop")
        assert done.returncode == 0 and f"stopped the daemon (pid {pid2})" in done.stdout
        assert not Path(f"/proc/{pid2}").exists() or "Z" in Path(f"/proc/{pid2}/stat").read_text()
        assert "no daemon ran" in _fedhpc(tmp_path, "daemon", "stop").stdout
    finally:
        stop_daemon(settings)


def _argv(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_text().split("\0")


def test_with_a_facade_the_daemon_started_holds_each_persons_tokens(tmp_path: Path) -> None:
    settings = DaemonSettings.from_env(home=tmp_path / "fed")
    # No provider is reached: the daemon only reads the config and seals people's tokens.
    config = facade_config(tmp_path, Provider("https://idp.lab.example"), "http://127.0.0.1:9")
    try:
        up = _fedhpc(tmp_path, "daemon", "restart", FEDHPC_CONFIG=str(config))
        assert up.returncode == 0, up.stderr
        pid = int(settings.lock_path.read_text().split()[0])
        assert _argv(pid)[1:3] == ["-m", "fedhpc.service.daemon"]  # same pid, re-executed
        assert (settings.home / "facade" / "tokens.key").exists()  # its people's tokens' seal
    finally:
        stop_daemon(settings)
