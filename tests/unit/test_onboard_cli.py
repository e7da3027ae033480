"""`fedhpc sites discover`, `connect` and `doctor` refuse bad command lines with a typed error
and a hint, before touching any site or file."""

from __future__ import annotations

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
