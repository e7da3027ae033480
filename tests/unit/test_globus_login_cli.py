"""`fedhpc login` / `logout` as a person runs them: the real CLI in a subprocess, on an empty
home, with no network (nothing here reaches Globus)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

CLIENT = "3f1d1e4a-5b6c-4d7e-8f90-a1b2c3d4e5f6"


def _fedhpc(
    tmp_path: Path, *argv: str, stdin: str = "", **env: str
) -> subprocess.CompletedProcess[str]:
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("GLOBUS_", "FEDHPC_")) and k not in ("DISPLAY", "WAYLAND_DISPLAY")
    }
    base.update(
        FEDHPC_HOME=str(tmp_path / "home"), FEDHPC_CONFIG=str(tmp_path / "none.toml"), **env
    )
    return subprocess.run(
        [sys.executable, "-m", "fedhpc.cli.main", *argv],
        input=stdin,
        capture_output=True,
        text=True,
        env=base,
        timeout=120,
        check=False,
    )


def test_status_on_an_empty_home_says_not_logged_in_and_exits_1(tmp_path: Path) -> None:
    out = _fedhpc(tmp_path, "login", "--status")
    assert out.returncode == 1
    assert "Not logged in to Globus. Run `fedhpc login`." in out.stdout
    assert "The daemon uses: compute: user, transfer: user" in out.stdout
    js = _fedhpc(tmp_path, "login", "--status", "--json")
    assert js.returncode == 1
    assert '"logged_in": false' in js.stdout


def test_status_names_the_service_identity_when_its_credentials_are_set(tmp_path: Path) -> None:
    out = _fedhpc(
        tmp_path,
        "login",
        "--status",
        GLOBUS_COMPUTE_CLIENT_ID=CLIENT,
        GLOBUS_COMPUTE_CLIENT_SECRET="canary-secret",
    )
    assert "compute: service (GLOBUS_COMPUTE_CLIENT_ID)" in out.stdout
    assert "canary-secret" not in out.stdout + out.stderr


def test_logout_on_an_empty_home_has_nothing_to_do(tmp_path: Path) -> None:
    out = _fedhpc(tmp_path, "logout")
    assert (out.returncode, out.stdout.strip()) == (0, "Not logged in to Globus; nothing to do.")


def test_login_without_a_client_id_is_a_typed_error_with_the_fix(tmp_path: Path) -> None:
    out = _fedhpc(tmp_path, "login", "--no-browser")
    assert out.returncode == 2
    assert "error[globus_client_id]" in out.stderr
    assert "fedhpc login --client-id" in out.stderr


@pytest.mark.parametrize("bad", ["not-a-uuid", "1234"])
def test_a_malformed_client_id_is_refused_before_anything_starts(tmp_path: Path, bad: str) -> None:
    out = _fedhpc(tmp_path, "login", "--client-id", bad)
    assert out.returncode == 2
    assert "is not a Globus client id" in out.stderr


def test_login_prints_the_address_and_fails_typed_when_no_code_comes(tmp_path: Path) -> None:
    out = _fedhpc(tmp_path, "login", "--no-browser", stdin="", FEDHPC_GLOBUS_CLIENT_ID=CLIENT)
    assert out.returncode == 2
    assert "https://auth.globus.org/v2/oauth2/authorize?client_id=" + CLIENT in out.stdout
    assert "error[globus_login_failed]: no authorization code was entered" in out.stderr
    assert not (tmp_path / "home" / "globus" / "login.json").exists()


def test_the_cli_and_the_auth_package_load_no_globus_sdk_until_a_login_runs() -> None:
    code = (
        "import sys, fedhpc.cli.main, fedhpc.globus_auth, fedhpc.cli.login\n"
        "fedhpc.cli.main.build_parser()\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('globus_sdk', 'globus_compute_sdk')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
