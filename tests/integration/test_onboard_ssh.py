"""Onboarding over a real sshd on loopback (the SSH devfed fixture: one Host alias per devfed
cluster, SLURM_CONF set by the login as on a real center): discover matches the shipped dev
profiles; doctor reports an expired ControlMaster with its fix while the other site passes;
connect opens the master, discovers a new center and runs the doctor."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from fedhpc.adapters.transports.ssh import SshTransport
from fedhpc.domain.site import TransportSpec
from fedhpc_dev.devfed.sshd import SshFront


def _fedhpc(
    home: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("FEDHPC_")}
    base.update({"FEDHPC_HOME": str(home), **(env or {})})
    return subprocess.run(
        [sys.executable, "-m", "fedhpc.cli.main", *args],
        env=base,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def _master(home: Path, front: SshFront, alias: str) -> SshTransport:
    spec = TransportSpec(kind="ssh", host=alias, options={"config_file": str(front.ssh_config)})
    return SshTransport(spec, state_dir=home, name=alias)


@pytest.mark.parametrize("site", ["devanvil", "devdelta", "devdeltaai", "devvista"])
def test_discover_over_ssh_matches_shipped(devfed_ssh: SshFront, tmp_path: Path, site: str) -> None:
    try:
        done = _fedhpc(
            tmp_path,
            "sites",
            "discover",
            site,
            "--ssh",
            site,
            "--option",
            f"config_file={devfed_ssh.ssh_config}",
            "--json",
        )
        assert done.returncode == 0, done.stderr
        out = json.loads(done.stdout)
        assert out["shipped"] is True and out["diff"] == [], out["diff"]
        # The person's way in goes to their config, never into the shipped profile.
        assert f'config_file = "{devfed_ssh.ssh_config}"' in out["config_entry"]
        assert "fedhpc-gpu" in out["config_entry"]
    finally:
        subprocess.run(
            _master(tmp_path, devfed_ssh, site).control_argv("exit"),
            capture_output=True,
            check=False,
        )


def _checks(report: dict[str, object], site: str) -> dict[str, dict[str, str]]:
    return {c["check"]: c for c in report["sites"][site]}  # type: ignore[index]


def test_doctor_reports_an_expired_control_master(devfed_ssh: SshFront, tmp_path: Path) -> None:
    env = {"FEDHPC_DEVFED": "1", **devfed_ssh.env()}
    (tmp_path / "config.toml").write_text("[sites.devdelta]\n[sites.devvista]\n")
    masters = [_master(tmp_path, devfed_ssh, a) for a in ("devdelta", "devvista")]
    try:
        done = _fedhpc(tmp_path, "doctor", "--json", "devdelta", "devvista", env=env)
        report = json.loads(done.stdout)
        assert done.returncode == 0, report
        assert _checks(report, "devdelta")["control_master"]["status"] == "pass"
        # The session expires (its master dies, leaving its socket) and new logins need MFA.
        check = subprocess.run(
            masters[0].control_argv("check"), capture_output=True, text=True, check=False
        )
        pid = int(re.search(r"pid=(\d+)", check.stderr + check.stdout).group(1))  # type: ignore[union-attr]
        devfed_ssh.revoke("devdelta")
        os.kill(pid, signal.SIGKILL)
        done = _fedhpc(tmp_path, "doctor", "--json", "devdelta", "devvista", env=env)
        report = json.loads(done.stdout)
        assert done.returncode == 1
        delta = _checks(report, "devdelta")
        assert delta["control_master"]["status"] == "fail"
        assert "fedhpc connect devdelta" in delta["control_master"]["fix"]
        assert delta["transport"]["status"] == "fail"
        assert "fedhpc connect devdelta" in delta["transport"]["fix"]
        assert delta["scheduler"]["status"] == "skip"
        vista = _checks(report, "devvista")
        assert "fail" not in {c["status"] for c in vista.values()}, vista
        assert vista["control_master"]["status"] == "pass"
        assert vista["associations"]["status"] == "skip"  # no account in this config
    finally:
        devfed_ssh.grant("devdelta")
        for m in masters:
            subprocess.run(m.control_argv("exit"), capture_output=True, check=False)


def test_connect_opens_the_master_discovers_and_doctors(
    devfed_ssh: SshFront, tmp_path: Path
) -> None:
    master = _master(tmp_path, devfed_ssh, "devdeltaai")
    try:
        done = _fedhpc(
            tmp_path,
            "connect",
            "mylab",
            "--ssh",
            "devdeltaai",
            "--option",
            f"config_file={devfed_ssh.ssh_config}",
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert "session open" in done.stdout
        assert "config: added [sites.mylab]" in done.stdout
        assert "all checks passed" in done.stdout
        assert "opened by fedhpc connect 0 min ago; stays open" in done.stdout
        assert (tmp_path / "profiles" / "mylab.toml").exists()
        alive = subprocess.run(master.control_argv("check"), capture_output=True, check=False)
        assert alive.returncode == 0  # the session stays for fedhpc's later calls
        again = _fedhpc(tmp_path, "connect", "mylab", "--no-doctor")
        assert again.returncode == 0, again.stderr
        assert "already open; reusing it" in again.stdout
        assert "already has [sites.mylab]; left as is" in again.stdout
    finally:
        subprocess.run(master.control_argv("exit"), capture_output=True, check=False)


def test_two_doctors_at_once_both_pass_over_one_new_master(
    devfed_ssh: SshFront, tmp_path: Path
) -> None:
    """No master open yet, two doctors start together: both open (or ride on) the sites'
    ControlMasters without tripping over each other, and both see every check pass."""
    env = {"FEDHPC_DEVFED": "1", **devfed_ssh.env()}
    (tmp_path / "config.toml").write_text("[sites.devdelta]\n[sites.devvista]\n")
    base = {k: v for k, v in os.environ.items() if not k.startswith("FEDHPC_")}
    base.update({"FEDHPC_HOME": str(tmp_path), **env})
    argv = [sys.executable, "-m", "fedhpc.cli.main", "doctor", "--json", "devdelta", "devvista"]
    masters = [_master(tmp_path, devfed_ssh, a) for a in ("devdelta", "devvista")]
    try:
        runs = [
            subprocess.Popen(
                argv,
                env=base,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                stdin=subprocess.DEVNULL,
                text=True,
            )
            for _ in range(2)
        ]
        for run in runs:
            out, err = run.communicate(timeout=300)
            report = json.loads(out)
            assert run.returncode == 0, (report, err[-2000:])
            for site in ("devdelta", "devvista"):
                checks = _checks(report, site)
                assert "fail" not in {c["status"] for c in checks.values()}, checks
                assert (
                    checks["test_submit:gpuA100x4" if site == "devdelta" else "scheduler"]["status"]
                    == "pass"
                )
    finally:
        for m in masters:
            subprocess.run(m.control_argv("exit"), capture_output=True, check=False)
