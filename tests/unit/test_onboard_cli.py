"""`fedhpc sites discover`, `connect` and `doctor` refuse bad command lines with a typed error
and a hint, before touching any site or file."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

FEDHPC = shutil.which("fedhpc", path=str(Path(sys.executable).parent)) or "fedhpc"


def _run(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FEDHPC_")}
    return subprocess.run(
        [FEDHPC, *args],
        capture_output=True,
        text=True,
        check=False,
        env={**env, "FEDHPC_HOME": str(home)},
        timeout=60,
    )


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["sites", "discover", "x"], "name exactly one of --ssh HOST"),
        (["sites", "discover", "x", "--ssh", "h", "--local"], "name exactly one of"),
        (["sites", "discover", "x", "--local", "--env", "NOEQUALS"], "is not NAME=VALUE"),
        (["sites", "discover", "bad name", "--local"], "is not a site name"),
        (["sites", "discover", "x", "--ssh=-oProxyCommand=x"], "is not a plain host name"),
        (["connect", "nosuchcenter"], "fedhpc has no profile named 'nosuchcenter'"),
        (["doctor", "nosuch"], "not configured: nosuch"),
        (["doctor"], "no site is configured"),
    ],
)
def test_refused_with_a_hint(tmp_path: Path, args: list[str], says: str) -> None:
    done = _run(tmp_path, *args)
    assert done.returncode in (2, 3, 6), done.stderr
    assert says in done.stderr and "hint:" in done.stderr
    assert not (tmp_path / "config.toml").exists()
    assert not (tmp_path / "profiles").exists()


def test_doctor_json_error_is_one_object(tmp_path: Path) -> None:
    done = _run(tmp_path, "doctor", "--json", "nosuch")
    assert done.returncode == 2
    assert '"code": "usage"' in done.stdout or '"code":' in done.stdout


def test_doctor_on_a_config_with_a_typod_site_name_names_the_close_profiles(
    tmp_path: Path,
) -> None:
    (tmp_path / "config.toml").write_text("[sites.devdleta]\n")
    done = _run(tmp_path, "doctor")
    assert done.returncode == 3, done.stderr
    assert "sites.devdleta: no site profile has this name" in done.stderr
    assert "hint: Did you mean devdelta" in done.stderr
    assert "fedhpc sites list" in done.stderr and "fedhpc connect devdleta" in done.stderr


def test_connect_to_a_host_ssh_cannot_resolve_says_so_with_a_hint(tmp_path: Path) -> None:
    done = _run(tmp_path, "connect", "mylab", "--ssh", "nosuchhost.invalid")
    assert done.returncode == 2, done.stderr
    assert "Could not resolve hostname nosuchhost.invalid" in done.stderr  # ssh's own words
    assert "error[usage]: ssh to nosuchhost.invalid failed (exit 255)" in done.stderr
    assert "hint: Check the host and user" in done.stderr
    assert not (tmp_path / "config.toml").exists()


def test_connect_without_an_ssh_client_names_the_package(tmp_path: Path) -> None:
    """A machine with every command of /usr/bin but OpenSSH's."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for cmd in Path("/usr/bin").iterdir():
        if not (cmd.name in ("ssh", "scp", "sftp") or cmd.name.startswith("ssh-")):
            (bin_dir / cmd.name).symlink_to(cmd)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FEDHPC_")}
    done = subprocess.run(
        [FEDHPC, "connect", "mylab", "--ssh", "login.example.edu"],
        capture_output=True,
        text=True,
        check=False,
        env={**env, "FEDHPC_HOME": str(tmp_path / "home"), "PATH": str(bin_dir)},
        timeout=60,
    )
    assert done.returncode == 6, done.stderr
    assert "error[transport_unavailable]: the ssh client is not installed" in done.stderr
    assert "hint: Install OpenSSH (package openssh-client)" in done.stderr


def test_doctor_for_a_typod_site_names_the_configured_one(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text("[sites.devdelta]\n")
    done = _run(tmp_path, "doctor", "devdleta")
    assert done.returncode == 2, done.stderr
    assert "not configured: devdleta" in done.stderr
    assert "hint: Did you mean devdelta? Add a site with `fedhpc connect SITE`" in done.stderr


def test_discover_over_ssh_to_a_host_that_does_not_resolve_names_what_to_check(
    tmp_path: Path,
) -> None:
    """Onboarding asks once: not the daemon's "fedhpc retries this itself"."""
    done = _run(tmp_path, "sites", "discover", "mylab", "--ssh", "nosuchhost.invalid")
    assert done.returncode == 2, done.stderr
    assert "error[discover_failed]: mylab: ssh to nosuchhost.invalid failed" in done.stderr
    assert "hint: Check that `ssh nosuchhost.invalid` works in this terminal" in done.stderr
    assert "fedhpc connect mylab --ssh nosuchhost.invalid" in done.stderr
    assert "retries this itself" not in done.stderr
    assert not (tmp_path / "config.toml").exists()
    assert not (tmp_path / "profiles").exists()


def test_doctor_for_an_ssh_host_that_does_not_resolve_names_what_to_check(
    tmp_path: Path,
) -> None:
    (tmp_path / "config.toml").write_text(
        '[sites.delta]\ntransport = { host = "nosuchhost.invalid" }\n'
    )
    done = _run(tmp_path, "doctor", "--json", "delta")
    assert done.returncode == 1, done.stderr
    checks = {c["check"]: c for c in json.loads(done.stdout)["sites"]["delta"]}
    reach = checks["transport"]
    assert reach["status"] == "fail" and "Could not resolve hostname" in reach["detail"]
    assert "check that `ssh nosuchhost.invalid` works in a terminal" in reach["fix"]
    assert "[sites.delta] transport" in reach["fix"] and "fedhpc connect delta" in reach["fix"]
    assert checks["scheduler"]["status"] == "skip"
