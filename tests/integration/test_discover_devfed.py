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
from fedhpc.profiles import load_profile
from fedhpc.profiles.loader import load_federation, load_user_config
from fedhpc_dev.profiles import dev_profiles_dir
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
    shipped = load_profile(dev_profiles_dir() / f"{site}.toml")
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


def test_a_scheduler_slower_than_the_timeout_is_told_to_retry_not_to_check_ssh(
    devfed: Devfed, tmp_path: Path
) -> None:
    """The controller answers its ping, but the questions take longer than --timeout (here a
    bound too short for any real Slurm): the error says the scheduler was slow and how to give
    it longer, not that the site could not be reached."""
    done = _fedhpc(
        tmp_path,
        "sites",
        "discover",
        "slowlab",
        "--local",
        "--dialect",
        "slurm",
        "--env",
        f"SLURM_CONF={devfed.conf('devanvil')}",
        "--timeout",
        "0.001",
    )
    assert done.returncode == 2, done.stdout
    assert (
        "error[discover_failed]: slowlab: the scheduler did not answer its questions "
        "within 0.001 s" in done.stderr
    ), done.stderr
    assert "Run this again" in done.stderr and "--timeout 240" in done.stderr
    assert "ssh" not in done.stderr
    assert not (tmp_path / "config.toml").exists()


def _no_database_conf(devfed: Devfed, folder: Path) -> Path:
    """A private copy of devdelta's slurm.conf whose accounting database port nobody listens
    on: the controller answers, sacctmgr cannot (the shared slurmdbd is never touched)."""
    folder.mkdir()
    conf = devfed.conf("devdelta").read_text()
    text = re.sub(r"(?m)^AccountingStoragePort=\d+$", "AccountingStoragePort=16998", conf)
    assert "AccountingStoragePort=16998" in text
    (folder / "slurm.conf").write_text(text)
    (folder / "gres.conf").write_text((devfed.conf("devdelta").parent / "gres.conf").read_text())
    return folder / "slurm.conf"


def _path_without(folder: Path, *names: str) -> str:
    """A PATH of /usr/bin's commands but `names`: a login node where they are not installed."""
    folder.mkdir()
    for cmd in Path("/usr/bin").iterdir():
        if cmd.name not in names:
            (folder / cmd.name).symlink_to(cmd)
    return str(folder)


def test_sacctmgr_missing_or_refused_still_discovers_and_says_what_to_confirm(
    devfed: Devfed, tmp_path: Path
) -> None:
    """The partitions come from scontrol; the accounts, which come from sacctmgr, are marked
    for the person to confirm with why (not installed / the database did not answer), and the
    doctor's association check says the same with its fix."""
    nodb = _no_database_conf(devfed, tmp_path / "nodb")
    cases = {
        "nosacct": (
            ["--env", f"SLURM_CONF={devfed.conf('devdelta')}"],
            ["--env", f"PATH={_path_without(tmp_path / 'bin', 'sacctmgr')}"],
            "sacctmgr is not on the site's PATH",
        ),
        "nodb": (["--env", f"SLURM_CONF={nodb}"], [], "the accounting database refused"),
    }
    for name, (conf, path, says) in cases.items():
        home = tmp_path / name
        done = _fedhpc(home, "sites", "discover", name, "--local", *conf, *path, "--json")
        assert done.returncode == 0, done.stderr
        out = json.loads(done.stdout)
        assert [p["name"] for p in out["partitions"]] == [
            "cpu",
            "gpuA100x4",
            "gpuA40x4",
            "interactive",
        ]
        assert out["accounts"] == []
        assert any(
            n.startswith("discovery could not read: assoc") and says in n for n in out["notes"]
        )
        accounts = next(c for c in out["confirm"] if c["field"] == "sites.accounts")
        assert says in accounts["why"] and "sacctmgr show assoc" in accounts["look_up"]
        assert "# no association was read" in out["config_entry"]
        env = {**os.environ, "FEDHPC_HOME": str(home)}
        env.pop("FEDHPC_DEVFED", None)
        doctor = subprocess.run(
            [sys.executable, "-m", "fedhpc.cli.main", "doctor", "--json", name],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert doctor.returncode == 1, doctor.stderr
        checks = {c["check"]: c for c in json.loads(doctor.stdout)["sites"][name]}
        assert checks["scheduler"]["status"] == "pass"
        assoc = checks["associations"]
        assert assoc["status"] == "fail"
        if name == "nosacct":
            assert assoc["detail"] == "sacctmgr is not on the site's PATH"
            assert "load the Slurm module" in assoc["fix"]
            assert "missing: sacctmgr" in checks["commands"]["detail"]
        else:
            assert "Connection refused" in assoc["detail"]
            assert "accounting database refused or did not answer" in assoc["fix"]
