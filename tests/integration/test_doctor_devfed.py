"""`fedhpc doctor` against the real local Slurm federation, one thing broken per site: a stopped
slurmctld (a private copy of a cluster's slurm.conf whose controller port nobody listens on:
the shared daemons are never touched), an account without association, an unknown QoS, a
missing storage root. Each is reported with its fix while the healthy sites pass."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from fedhpc_dev.profiles import dev_profiles_dir
from tests.integration.conftest import Devfed

FREE_PORT = 16999  # outside every devfed cluster's port block (16900 + 20 i)


def _profile(devfed: Devfed, name: str, base: str, *, conf: Path, storage: str) -> str:
    shipped = (dev_profiles_dir() / f"{base}.toml").read_text()
    text = shipped.replace(f'name = "{base}"', f'name = "{name}"').replace(
        "local_test = true\n", ""
    )
    text = text.replace(f"{{devfed}}/{base}/slurm.conf", str(conf))
    return text.replace(f"{{devfed}}/{base}/storage", storage)


def _doctor(home: Path, *sites: str) -> tuple[int, dict[str, object]]:
    env = {**os.environ, "FEDHPC_HOME": str(home)}
    for var in ("FEDHPC_DEVFED", "FEDHPC_CONFIG"):
        env.pop(var, None)
    done = subprocess.run(
        [sys.executable, "-m", "fedhpc.cli.main", "doctor", "--json", *sites],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.stdout, done.stderr
    return done.returncode, json.loads(done.stdout)


def _by_name(report: dict[str, object], site: str) -> dict[str, dict[str, str]]:
    checks = report["sites"][site]  # type: ignore[index]
    return {c["check"]: c for c in checks}


def test_each_broken_thing_is_reported_with_its_fix(devfed: Devfed, tmp_path: Path) -> None:
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    stopped = tmp_path / "stopped-slurm.conf"
    conf = devfed.conf("devanvil").read_text()
    stopped.write_text(re.sub(r"(?m)^SlurmctldPort=\d+$", f"SlurmctldPort={FREE_PORT}", conf))
    assert f"SlurmctldPort={FREE_PORT}" in stopped.read_text()
    (profiles / "stopped.toml").write_text(
        _profile(
            devfed,
            "stopped",
            "devanvil",
            conf=stopped,
            storage=str(devfed.root / "devanvil/storage"),
        )
    )
    (profiles / "nostore.toml").write_text(
        _profile(
            devfed,
            "nostore",
            "devdeltaai",
            conf=devfed.conf("devdeltaai"),
            storage=str(tmp_path / "no-such-folder"),
        )
    )
    (tmp_path / "config.toml").write_text(
        "[sites.devdelta]\n"
        '[[sites.devdelta.accounts]]\nname = "fedhpc-gpu"\n'
        "[sites.devvista]\n"
        '[[sites.devvista.accounts]]\nname = "fedhpc-gpu"\nqos = "nosuchqos"\n'
        "[sites.devanvil]\n"
        '[[sites.devanvil.accounts]]\nname = "nosuch-acct"\npartitions = ["ai"]\n'
        "[sites.stopped]\n"
        "[sites.nostore]\n"
        '[[sites.nostore.accounts]]\nname = "fedhpc-gpu"\n'
    )
    rc, report = _doctor(tmp_path)
    assert rc == 1 and report["ok"] is False

    good = _by_name(report, "devdelta")
    assert {c["status"] for c in good.values()} == {"pass"}, good
    assert {
        "transport",
        "clock",
        "commands",
        "scheduler",
        "association:fedhpc-gpu",
        "test_submit:gpuA100x4",
        "storage:scratch",
    } <= set(good)

    down = _by_name(report, "stopped")
    assert down["transport"]["status"] == "pass"
    assert down["scheduler"]["status"] == "fail"
    assert "DOWN" in down["scheduler"]["detail"]
    assert (
        "check that it is up" in down["scheduler"]["fix"]
        and str(stopped) in down["scheduler"]["fix"]
    )
    assert "test_submit:shared" not in down  # nothing further is asked of a dead controller

    anvil = _by_name(report, "devanvil")
    assoc = anvil["association:nosuch-acct"]
    assert assoc["status"] == "fail" and "no association on ai" in assoc["detail"]
    assert "ask the center to add nosuch-acct" in assoc["fix"]
    assert anvil["test_submit:ai"]["status"] == "fail"  # the scheduler agrees

    vista = _by_name(report, "devvista")
    assert vista["association:fedhpc-gpu"]["status"] == "pass"
    qos = vista["qos:fedhpc-gpu"]
    assert qos["status"] == "fail" and "not a QoS this scheduler knows" in qos["detail"]
    assert "normal" in qos["fix"]

    nostore = _by_name(report, "nostore")
    store = nostore["storage:scratch"]
    assert store["status"] == "fail" and store["detail"].endswith("missing")
    assert "create" in store["fix"]
    assert nostore["test_submit:ghx4"]["status"] == "pass"

    # Asking for the healthy site alone: exit status 0.
    rc, report = _doctor(tmp_path, "devdelta")
    assert rc == 0 and report["ok"] is True


def test_a_resume_runtime_that_cannot_start_is_its_own_failed_check(
    devfed: Devfed, tmp_path: Path
) -> None:
    """With the resume bridge's config, each configured runtime is checked (as `fedhpc
    deliveries check`): a binary that is not there fails with its fix; the site still passes."""
    (tmp_path / "config.toml").write_text(
        '[resume.codex]\nbinary = "/nonexistent/codex"\n'
        "[sites.devdelta]\n"
        '[[sites.devdelta.accounts]]\nname = "fedhpc-gpu"\n'
    )
    rc, report = _doctor(tmp_path, "devdelta")
    assert rc == 1 and report["ok"] is False
    assert {c["status"] for c in _by_name(report, "devdelta").values()} == {"pass"}
    resume = report["resume"]
    assert isinstance(resume, list) and len(resume) == 1
    codex: dict[str, str] = resume[0]
    assert codex["check"] == "runtime:codex" and codex["status"] == "fail"
    assert "not found" in codex["detail"] and "[resume.codex]" in codex["fix"]
