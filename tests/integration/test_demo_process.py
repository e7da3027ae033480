"""`fedhpc demo` on the four local-process sites, end to end as a subprocess. Needs no Slurm:
it never reads, starts or cancels anything in the Slurm federation."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

NOBODY = 65534


def _demo_env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FEDHPC_")}
    # A private folder: the Slurm federation's folder is never looked at or written.
    env["FEDHPC_DEVFED_DIR"] = str(tmp / "devfed")
    env["HOME"] = str(tmp)
    env["XDG_STATE_HOME"] = str(tmp / "state")
    # The child stuck on the saturated devanvil is stalled once it has been pending 5 s, not
    # the default 15 s: re-placed as its siblings end (they run 5 s), not 10 s after.
    env["FEDHPC_STALL_S"] = "5"
    return env


def _check_resume(out: str) -> None:
    assert "agent: resumed by group.round_terminal" in out, out
    assert "agent: group completed: {'completed': 4}" in out, out
    rows = [ln.split() for ln in out.splitlines() if re.match(r"^  t[0-9a-f]{6,}(-\d+)? +\d ", ln)]
    tasks = {r[0] for r in rows}
    assert len(tasks) == 4, out
    sites = {r[2] for r in rows}
    assert sites <= {"devanvil", "devdelta", "devdeltaai", "devvista"}
    replaced = [r for r in rows if "superseded, re-placed" in " ".join(r)]
    assert len(replaced) == 1, out
    # The superseded attempt sat on the saturated devanvil; its task then completed elsewhere.
    task = replaced[0][0]
    assert replaced[0][2] == "devanvil"
    final = [r for r in rows if r[0] == task and r[1] == "2"]
    assert final and final[0][4] == "completed" and final[0][2] != "devanvil", out
    assert all(r[4] == "completed" for r in rows if r is not replaced[0]), out
    assert re.search(r"demo: done in \d+s with zero status calls by the agent", out), out


def test_demo_on_process_sites_resumes_the_agent_with_a_replaced_attempt(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "fedhpc.cli.main",
            "demo",
            "--sites",
            "process",
            "--deadline",
            "120",
            "--home",
            str(tmp_path / "home"),
        ],
        env=_demo_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "sites: 4 sites that run jobs as local processes" in out
    assert "devanvil's H100s are now busy with background jobs" in out
    _check_resume(out)
    # The background jobs were cancelled at the end, through the process scheduler.
    acct = subprocess.run(
        [
            sys.executable,
            "-m",
            "fedhpc_dev.localsched",
            "--root",
            str(tmp_path / "devfed" / "devanvil" / "localsched"),
            "queue",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert acct.stdout.strip() == "[]"


def _as_nobody(setpriv: str) -> tuple[list[str], dict[str, str]]:
    """argv prefix and environment to run this interpreter's packages as nobody. A venv whose
    interpreter lives under root's home is not executable by nobody: then the system python of
    the same version runs with this interpreter's import path."""
    prefix = [setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    # The demo re-executes sys.executable (daemon, agent): try that, not just the first exec.
    code = "import subprocess, sys; subprocess.run([sys.executable, '-c', '0'], check=True)"
    ok = (
        subprocess.run(
            [*prefix, sys.executable, "-c", code], capture_output=True, check=False, timeout=60
        ).returncode
        == 0
    )
    if ok:
        return [*prefix, sys.executable], {}
    system = Path(f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}")
    if not system.exists():
        pytest.fail(f"nobody cannot run {sys.executable} and there is no {system}")
    return [*prefix, str(system)], {"PYTHONPATH": ":".join(p for p in sys.path if p)}


def test_demo_auto_without_root_says_why_and_falls_back(tmp_path: Path) -> None:
    """As a user who cannot start Slurm (nobody, when the tests run as root)."""
    work, python = tmp_path, [sys.executable]
    extra: dict[str, str] = {}
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.fail("running as root needs setpriv (util-linux) to drop to nobody")
        python, extra = _as_nobody(setpriv)
        work = Path(tempfile.mkdtemp(prefix="fedhpc-demo-nobody-"))  # /tmp: nobody can reach it
        os.chown(work, NOBODY, NOBODY)
    try:
        done = subprocess.run(
            [
                *python,
                "-m",
                "fedhpc.cli.main",
                "demo",
                "--deadline",
                "120",
                "--home",
                str(work / "home"),
            ],
            env={**_demo_env(work), **extra},
            capture_output=True,
            text=True,
            timeout=240,
            check=False,
        )
    finally:
        if work != tmp_path:
            shutil.rmtree(work, ignore_errors=True)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "demo: not using Slurm: it is not running, and starting it needs root" in out, out
    assert "falling back to 4 sites that run jobs as local processes" in out
    _check_resume(out)
