"""devpolaris as data: vnodes and queues from the shipped profile, the files PBS reads, and the
build's package list kept in step with ./dev (no PBS needed)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fedhpc.domain.config import UserConfig
from fedhpc.profiles import load_federation, load_profiles
from fedhpc_dev.devfed.pbs import HOSTS_MARK, pbs_up, without_our_alias
from fedhpc_dev.devfed.pbs_build import BUILD_PACKAGES, prefix_for
from fedhpc_dev.devfed.pbs_plan import (
    DATA_PORT,
    PbsPlan,
    pbs_profile,
    plan_pbs,
    qmgr_script,
    render_pbs_conf,
    render_vnodes,
)
from fedhpc_dev.devfed.plan import plan_federation

ROOT = Path("/var/tmp/fedhpc-devfed")


def _plan() -> PbsPlan:
    profile = pbs_profile(load_profiles().values())
    assert profile is not None and profile.name == "devpolaris"
    return plan_pbs(profile, ROOT, "vm")


def test_the_slurm_federation_never_plans_the_pbs_site() -> None:
    plan = plan_federation(load_profiles().values(), ROOT, "vm")
    assert "devpolaris" not in {c.name for c in plan.clusters}
    assert len(plan.clusters) == 4


def test_a_vnode_per_profile_node_tied_to_its_queue() -> None:
    plan = _plan()
    assert [(v.name, v.queue, v.gpus, v.gpu_type) for v in plan.vnodes] == [
        ("prod-1", "prod", 4, "a100"),
        ("prod-2", "prod", 4, "a100"),
        ("debug-1", "debug", 4, "a100"),
    ]
    text = render_vnodes(plan)
    assert text.startswith("$configversion 2\n")
    # The natural vnode runs nothing; each vnode is its own host so place=scatter can spread.
    assert "devpolaris: resources_available.ncpus = 0" in text
    assert "prod-2: resources_available.host = prod-2" in text
    assert "debug-1: resources_available.ngpus = 4" in text


def test_queues_carry_the_profile_wall_and_node_caps() -> None:
    lines = qmgr_script(_plan())
    assert "set queue prod resources_max.walltime = 04:00:00" in lines
    assert "set queue debug resources_max.walltime = 01:00:00" in lines
    assert "set queue prod resources_max.nodect = 2" in lines
    assert "set server default_queue = prod" in lines
    assert "set server job_history_enable = True" in lines


def test_pbs_conf_names_the_cluster_not_a_loopback_host() -> None:
    plan = _plan()
    conf = render_pbs_conf(plan, Path("/opt/fedhpc-openpbs-0123456789ab"))
    assert "PBS_SERVER=devpolaris\n" in conf and "PBS_MOM_NODE_NAME=devpolaris\n" in conf
    assert f"PBS_DATA_SERVICE_PORT={DATA_PORT}\n" in conf
    # PBS_HOME below a world-writable folder (/var/tmp) is refused by pbs_mom.
    assert not str(plan.home).startswith(("/var/tmp", "/tmp"))


def test_the_prefix_is_keyed_by_the_tarball_content(tmp_path: Path) -> None:
    a, b = tmp_path / "openpbs-a.tar.gz", tmp_path / "openpbs-b.tar.gz"
    a.write_bytes(b"one")
    b.write_bytes(b"two")
    assert prefix_for(a) != prefix_for(b)
    assert re.fullmatch(r"/opt/fedhpc-openpbs-[0-9a-f]{12}", str(prefix_for(a)))


def test_dev_installs_every_build_package() -> None:
    dev = (Path(__file__).parents[2] / "dev").read_text()
    words = set(re.sub(r"\\\n", " ", dev).split())
    assert set(BUILD_PACKAGES) - {"postgresql"} <= words


def test_devfed_modes_enable_the_schedulers_they_name(monkeypatch: pytest.MonkeyPatch) -> None:
    slurm = {"devanvil", "devdelta", "devdeltaai", "devvista"}
    expected = {
        "1": slurm,
        "process": slurm,
        "pbs": {"devpolaris"},
        "slurm+pbs": {*slurm, "devpolaris"},
    }
    for value, sites in expected.items():
        monkeypatch.setenv("FEDHPC_DEVFED", value)
        assert set(load_federation(UserConfig())) == sites, value
    # Process mode runs the Slurm sites as local processes; devpolaris is never swapped.
    monkeypatch.setenv("FEDHPC_DEVFED", "process")
    assert load_profiles()["devpolaris"].dialect == "pbs"


def test_devpolaris_without_a_config_entry_charges_its_profiles_account(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # PBS has no associations the probe could read: the account comes from the profile.
    monkeypatch.setenv("FEDHPC_DEVFED", "pbs")
    site = load_federation(UserConfig())["devpolaris"]
    assert [a.name for a in site.user.accounts] == ["fedhpc-gpu"]
    assert site.profile.transport.env["PBS_CONF_FILE"].endswith("/devpolaris/pbs.conf")


def test_pbs_up_says_why_when_the_tarball_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FEDHPC_OPENPBS_TARBALL", str(tmp_path / "no-such.tar.gz"))
    out = pbs_up(tmp_path, "vm", load_profiles().values())
    assert out.up is False
    assert "no-such.tar.gz" in out.detail or "root" in out.detail
    assert not (tmp_path / "devpolaris").exists()  # nothing was written


def test_without_a_tarball_the_newest_finished_build_is_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkout with no ../shared/vendor beside it (CI's, elsewhere on a machine that built
    OpenPBS before) runs the build under /opt; a half-finished one never counts."""
    from fedhpc_dev.devfed import DevfedError, pbs_build

    monkeypatch.delenv("FEDHPC_OPENPBS_TARBALL", raising=False)
    monkeypatch.setattr(pbs_build, "PREFIX_ROOT", tmp_path / "opt")
    monkeypatch.setattr(pbs_build, "_vendor_dir", lambda: tmp_path / "no-vendor")
    with pytest.raises(DevfedError, match="no OpenPBS tarball"):
        pbs_build.ready_prefix(tmp_path / "log")
    done = tmp_path / "opt" / "fedhpc-openpbs-aaaaaaaaaaaa"
    (done / "sbin").mkdir(parents=True)
    (done / "sbin" / "pbs_server.bin").write_text("")
    (done / pbs_build.DONE).write_text("tarball=openpbs-x.tar.gz\n")
    half = tmp_path / "opt" / "fedhpc-openpbs-bbbbbbbbbbbb"
    (half / "sbin").mkdir(parents=True)  # a build that never finished
    assert pbs_build.ready_prefix(tmp_path / "log") == done
    monkeypatch.setenv("FEDHPC_OPENPBS_TARBALL", str(tmp_path / "named.tar.gz"))
    with pytest.raises(DevfedError, match="is not a file"):  # a named tarball must exist
        pbs_build.ready_prefix(tmp_path / "log")


def test_a_purge_takes_out_only_the_hosts_line_up_added() -> None:
    text = (
        "127.0.0.1 localhost\n"
        "10.0.0.5 devpolaris  # the person's own line for the name\n"
        f"10.0.0.7 devpolaris  {HOSTS_MARK}\n"
        f"10.0.0.7 otherhost  {HOSTS_MARK}\n"
        "::1 localhost ip6-localhost\n"
    )
    kept = without_our_alias(text, "devpolaris")
    assert kept == text.replace(f"10.0.0.7 devpolaris  {HOSTS_MARK}\n", "")
    assert without_our_alias(kept, "devpolaris") == kept
