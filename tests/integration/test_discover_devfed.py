"""`fedhpc sites discover --local` against the four real Slurm clusters of the local federation:
each discovered profile matches the shipped dev* profile on partitions, node shapes, GPU types
and counts, and wall caps; the files land in the user's folders and read back."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fedhpc.domain.config import UserConfig
from fedhpc.profiles import load_profile, shipped_profiles_dir
from fedhpc.profiles.loader import load_federation, load_user_config
from tests.integration.conftest import Devfed

SITES = ("devanvil", "devdelta", "devdeltaai", "devvista")


def _fedhpc(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "FEDHPC_HOME": str(home)}
    env.pop("FEDHPC_DEVFED", None)
    env.pop("FEDHPC_CONFIG", None)
    return subprocess.run(
        [sys.executable, "-m", "fedhpc.cli.main", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize("site", SITES)
def test_discovered_profile_matches_shipped(devfed: Devfed, tmp_path: Path, site: str) -> None:
    done = _fedhpc(
        tmp_path,
        "sites",
        "discover",
        site,
        "--local",
        "--env",
        f"SLURM_CONF={devfed.conf(site)}",
        "--json",
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["shipped"] is True
    assert out["diff"] == [], out["diff"]
    shipped = load_profile(shipped_profiles_dir() / f"{site}.toml")
    assert [p["name"] for p in out["partitions"]] == [p.name for p in shipped.partitions]
    for got, want in zip(out["partitions"], shipped.partitions, strict=True):
        acc = want.node.accelerator
        assert (got["cpus"], got["memory_mib"], got["nodes"]) == (
            want.node.cpus,
            want.node.memory_mib,
            want.node.count,
        )
        assert (got["gpu_type"], got["gpus"]) == ((acc.type, acc.count) if acc else (None, 0))
        assert got["max_wall_s"] == want.max_wall_s
    # A shipped center is never shadowed: the discovered profile is kept for reference.
    path = Path(out["profile_path"])
    assert path == tmp_path / "profiles" / "discovered" / f"{site}.toml"
    assert load_profile(path).name == site
    assert out["config_written"] is True
    config = load_user_config(tmp_path / "config.toml")
    assert {a.name for a in config.sites[site].accounts} == {"fedhpc-cpu", "fedhpc-gpu"}
    fields = {c["field"] for c in out["confirm"]}
    assert {"charge", "blocked_partitions", "containers.runtimes", "storage"} <= fields


def test_new_center_is_written_loaded_and_kept_on_a_second_run(
    devfed: Devfed, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A center fedhpc does not ship: the profile goes to <home>/profiles and is used; the
    config entry is added once and a second discovery leaves the person's edits alone."""
    args = [
        "sites",
        "discover",
        "mylab",
        "--local",
        "--env",
        f"SLURM_CONF={devfed.conf('devdelta')}",
    ]
    first = _fedhpc(tmp_path, *args)
    assert first.returncode == 0, first.stderr
    assert "config: added [sites.mylab]" in first.stdout
    assert "confirm (the scheduler cannot tell these):" in first.stdout
    config_path = tmp_path / "config.toml"
    edited = config_path.read_text().replace("# budget = 1000.0", "budget = 50.0", 1)
    config_path.write_text(edited)
    second = _fedhpc(tmp_path, *args)
    assert second.returncode == 0, second.stderr
    assert "already has [sites.mylab]; left as is" in second.stdout
    assert config_path.read_text() == edited
    monkeypatch.setenv("FEDHPC_HOME", str(tmp_path))
    monkeypatch.delenv("FEDHPC_DEVFED", raising=False)
    sites = load_federation(load_user_config(config_path), config_path=config_path)
    assert list(sites) == ["mylab"]
    assert sites["mylab"].profile.transport.env["SLURM_CONF"] == str(devfed.conf("devdelta"))
    assert sites["mylab"].user.accounts[0].budget == 50.0
    assert isinstance(load_user_config(config_path), UserConfig)


def test_unreachable_scheduler_is_a_typed_error(devfed: Devfed, tmp_path: Path) -> None:
    """A stopped controller (a private copy of a cluster's slurm.conf whose controller port
    nobody listens on; the shared daemons are never touched) and a missing slurm.conf."""
    stopped = tmp_path / "stopped.conf"
    conf = devfed.conf("devdelta").read_text()
    stopped.write_text(re.sub(r"(?m)^SlurmctldPort=\d+$", "SlurmctldPort=16999", conf))
    for path, says in (
        (stopped, "slurmctld does not answer"),
        (tmp_path / "no.conf", "not a file"),
    ):
        done = _fedhpc(
            tmp_path,
            "sites",
            "discover",
            "nowhere",
            "--local",
            "--dialect",
            "slurm",
            "--env",
            f"SLURM_CONF={path}",
        )
        assert done.returncode == 2, done.stdout
        assert "error[discover_failed]" in done.stderr and says in done.stderr
        assert "hint:" in done.stderr
    assert not (tmp_path / "config.toml").exists()
    assert not (tmp_path / "profiles").exists()
