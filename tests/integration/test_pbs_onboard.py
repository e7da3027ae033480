"""Onboarding against the real OpenPBS server: `fedhpc sites discover devpolaris --local` writes
a profile that matches the shipped devpolaris profile, and `fedhpc doctor` passes on it and fails,
with its fix, on a copy whose pbs.conf names a server port nobody listens on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from fedhpc.profiles import load_profile
from fedhpc_dev.profiles import dev_profiles_dir
from tests.integration.pbs_support import SITE, Devpolaris, devpolaris

__all__ = ["devpolaris"]  # the fixture, imported for pytest

FREE_PORT = 15099  # no PBS daemon listens here


def _fedhpc(home: Path, *args: str, devfed: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "FEDHPC_HOME": str(home)}
    for var in ("FEDHPC_DEVFED", "FEDHPC_CONFIG"):
        env.pop(var, None)
    if devfed:
        env["FEDHPC_DEVFED"] = devfed
    return subprocess.run(
        [sys.executable, "-m", "fedhpc.cli.main", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_discovered_profile_matches_the_shipped_one(devpolaris: Devpolaris, tmp_path: Path) -> None:
    # The login environment carries both Slurm's and PBS's clients: the one that answers wins.
    env = devpolaris.env()
    done = _fedhpc(
        tmp_path,
        *("sites", "discover", SITE, "--local", "--json"),
        *("--env", f"PBS_CONF_FILE={env['PBS_CONF_FILE']}", "--env", f"PATH={env['PATH']}"),
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["dialect"] == "pbs"
    assert out["shipped"] is True
    assert out["diff"] == [], out["diff"]
    shipped = load_profile(dev_profiles_dir() / f"{SITE}.toml")
    assert [p["name"] for p in out["partitions"]] == [p.name for p in shipped.partitions]
    for got, want in zip(out["partitions"], shipped.partitions, strict=True):
        acc = want.node.accelerator
        assert acc is not None
        assert (got["cpus"], got["memory_mib"], got["nodes"]) == (
            want.node.cpus,
            want.node.memory_mib,
            want.node.count,
        )
        assert (got["gpu_type"], got["gpus"]) == (acc.type, acc.count)
        assert got["max_wall_s"] == want.max_wall_s
    fields = {c["field"] for c in out["confirm"]}
    assert "sites.accounts" in fields  # PBS keeps no associations fedhpc can read
    assert load_profile(Path(out["profile_path"])).dialect == "pbs"


def test_doctor_passes_on_devpolaris_and_names_the_fix_for_a_dead_server(
    devpolaris: Devpolaris, tmp_path: Path
) -> None:
    conf = tmp_path / "pbs-down.conf"
    conf.write_text(devpolaris.conf.read_text() + f"PBS_BATCH_SERVICE_PORT={FREE_PORT}\n")
    shipped = (dev_profiles_dir() / f"{SITE}.toml").read_text()
    text = shipped.replace(f'name = "{SITE}"', 'name = "pbsdown"').replace(
        "local_test = true\n", ""
    )
    text = text.replace("{devfed}/devpolaris/pbs.conf", str(conf))
    text = text.replace("{devfed}", str(devpolaris.root))
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "pbsdown.toml").write_text(text)
    (tmp_path / "config.toml").write_text(
        f'[sites.{SITE}]\n[[sites.{SITE}.accounts]]\nname = "fedhpc-gpu"\n'
        '[sites.pbsdown]\n[[sites.pbsdown.accounts]]\nname = "fedhpc-gpu"\n'
    )
    done = _fedhpc(tmp_path, "doctor", "--json")
    assert done.stdout, done.stderr
    report = json.loads(done.stdout)
    assert done.returncode == 1 and report["ok"] is False
    good = {c["check"]: c for c in report["sites"][SITE]}
    assert {"transport", "clock", "commands", "scheduler"} <= set(good)
    assert {c["status"] for c in good.values()} <= {"pass", "skip"}, good
    assert "qsub, qstat, qdel, pbsnodes" in good["commands"]["detail"]
    down = {c["check"]: c for c in report["sites"]["pbsdown"]}
    assert down["commands"]["status"] == "pass"
    assert down["scheduler"]["status"] == "fail", down["scheduler"]
    assert down["scheduler"]["fix"]
    done = _fedhpc(tmp_path, "doctor", "--json", SITE)
    assert done.returncode == 0, done.stdout
