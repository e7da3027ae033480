"""The devfed plan and rendered Slurm configs agree with the shipped local-test profiles."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fedhpc.domain.site import SiteProfile
from fedhpc.domain.units import parse_duration
from fedhpc.profiles import load_profiles
from fedhpc_dev.devfed.config import render_gres_conf, render_slurm_conf, render_slurmdbd_conf
from fedhpc_dev.devfed.instances import instance_root, instances_of, read_instance, write_instance
from fedhpc_dev.devfed.plan import (
    CTLD_PORT_BASE,
    DBD_PORT,
    MYSQL_PORT,
    PORT_STRIDE,
    ClusterPlan,
    FederationPlan,
    Instance,
    plan_federation,
)
from fedhpc_dev.devfed.status import parse_nodes

ROOT = Path("/devfed-test")


@pytest.fixture
def profiles() -> dict[str, SiteProfile]:
    return {n: p for n, p in load_profiles().items() if p.local_test}


@pytest.fixture
def plan(profiles: dict[str, SiteProfile]) -> FederationPlan:
    return plan_federation(profiles.values(), ROOT, "testhost")


def _conf(plan: FederationPlan, cluster: ClusterPlan) -> dict[str, str]:
    lines = render_slurm_conf(plan, cluster).splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line and " " not in line)


def _records(text: str, kind: str) -> dict[str, dict[str, str]]:
    out = {}
    for line in text.splitlines():
        if line.startswith(f"{kind}="):
            fields = dict(f.split("=", 1) for f in line.split())
            out[fields[kind]] = fields
    return out


def test_the_federation_is_the_four_local_test_profiles(plan: FederationPlan) -> None:
    assert [c.name for c in plan.clusters] == ["devanvil", "devdelta", "devdeltaai", "devvista"]


def test_every_port_is_distinct_and_clear_of_the_shared_daemons(plan: FederationPlan) -> None:
    ports = [c.ctld_port for c in plan.clusters] + [n.port for c in plan.clusters for n in c.nodes]
    assert len(ports) == len(set(ports))
    assert min(ports) >= CTLD_PORT_BASE
    assert DBD_PORT not in ports
    assert MYSQL_PORT not in ports


def test_each_cluster_writes_only_under_its_own_folder(plan: FederationPlan) -> None:
    for cluster in plan.clusters:
        conf = _conf(plan, cluster)
        assert conf["ClusterName"] == cluster.name
        for key in ("StateSaveLocation", "SlurmdSpoolDir", "SlurmctldPidFile", "SlurmdLogFile"):
            assert conf[key].startswith(f"{ROOT}/{cluster.name}/"), key
        assert conf["AuthInfo"] == f"socket={plan.munge_socket}"
        assert conf["AccountingStoragePort"] == str(DBD_PORT)
        assert conf["AccountingStorageEnforce"] == "associations"


def test_slurm_conf_path_matches_the_profile_env(
    plan: FederationPlan, profiles: dict[str, SiteProfile], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FEDHPC_DEVFED_DIR", str(ROOT))
    fresh = {n: p for n, p in load_profiles().items() if p.local_test}
    for cluster in plan.clusters:
        assert fresh[cluster.name].transport.env["SLURM_CONF"] == str(cluster.conf)
        assert cluster.env() == {"SLURM_CONF": str(cluster.conf)}


def test_partitions_caps_and_node_shapes_match_the_profiles(
    plan: FederationPlan, profiles: dict[str, SiteProfile]
) -> None:
    for cluster in plan.clusters:
        text = render_slurm_conf(plan, cluster)
        parts = _records(text, "PartitionName")
        nodes = _records(text, "NodeName")
        profile = profiles[cluster.name]
        assert set(parts) == {p.name for p in profile.partitions}
        for spec in profile.partitions:
            part = parts[spec.name]
            assert parse_duration(part["MaxTime"]) == spec.max_wall_s
            assert part["MaxNodes"] == str(spec.max_nodes_per_job)
            members = part["Nodes"].split(",")
            assert len(members) == spec.node.count
            for name in members:
                node = nodes[name]
                assert node["CPUs"] == str(spec.node.cpus)
                assert node["RealMemory"] == str(spec.node.memory_mib)
                assert node["Features"] == profile.arch_of(spec.name).value
                acc = spec.node.accelerator
                expected = f"gpu:{acc.gres_type}:{acc.count}" if acc else None
                assert node.get("Gres") == expected


def test_gpu_totals_per_partition_match_the_profiles(
    plan: FederationPlan, profiles: dict[str, SiteProfile]
) -> None:
    for cluster in plan.clusters:
        for spec in profiles[cluster.name].partitions:
            acc = spec.node.accelerator
            want = acc.count * spec.node.count if acc else 0
            got = sum(n.gpus for n in cluster.nodes if n.partition == spec.name)
            assert got == want, (cluster.name, spec.name)


def test_accounting_records_every_gpu_type_of_the_cluster(plan: FederationPlan) -> None:
    delta = _conf(plan, plan.cluster("devdelta"))
    assert delta["AccountingStorageTRES"] == "gres/gpu,gres/gpu:a100,gres/gpu:a40"
    assert _conf(plan, plan.cluster("devanvil"))["AccountingStorageTRES"] == (
        "gres/gpu,gres/gpu:h100"
    )


def test_gres_conf_names_one_planned_symlink_per_fake_gpu(plan: FederationPlan) -> None:
    for cluster in plan.clusters:
        links = set(cluster.gpu_links())
        assert len(links) == sum(n.gpus for n in cluster.nodes)
        named: set[Path] = set()
        for line in render_gres_conf(cluster).splitlines()[1:]:
            fields = dict(f.split("=", 1) for f in line.split())
            m = re.fullmatch(r"(.*)\[0-(\d+)\]", fields["File"])
            assert m is not None
            named |= {Path(f"{m.group(1)}{i}") for i in range(int(m.group(2)) + 1)}
        assert named == links
        assert all(str(p).startswith(f"{ROOT}/{cluster.name}/dev/") for p in links)


def test_slurmdbd_conf_points_at_the_private_mariadb(plan: FederationPlan) -> None:
    text = render_slurmdbd_conf(plan, "s3cret")
    conf = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    assert conf["DbdPort"] == str(DBD_PORT)
    assert conf["StoragePort"] == str(MYSQL_PORT)
    assert conf["StorageHost"] == "127.0.0.1"
    assert conf["StoragePass"] == "s3cret"
    assert plan.dbd_conf.parent == plan.dbd_slurm_conf.parent


def test_rendering_is_deterministic(profiles: dict[str, SiteProfile]) -> None:
    a = plan_federation(profiles.values(), ROOT, "h")
    b = plan_federation(reversed(list(profiles.values())), ROOT, "h")
    assert [render_slurm_conf(a, c) for c in a.clusters] == [
        render_slurm_conf(b, c) for c in b.clusters
    ]


def test_config_module_loads_no_io_library() -> None:
    code = (
        "import json, sys\n"
        "import fedhpc_dev.devfed.config, fedhpc_dev.devfed.plan, fedhpc_dev.devfed.status\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(json.loads(out.stdout))
    assert not loaded & {"subprocess", "structlog", "tenacity", "anyio", "asyncio"}


SCONTROL = (
    "NodeName=gpua100x4-1 Arch=x86_64 CoresPerSocket=1 CPUAlloc=2 CPUEfctv=64 CPUTot=64 "
    "Gres=gpu:a100:4 NodeAddr=127.0.0.1 OS=Linux 6.1 #1 SMP RealMemory=131072 State=MIXED "
    "Partitions=gpuA100x4 CfgTRES=cpu=64,mem=128G,gres/gpu=4 "
    "AllocTRES=cpu=2,mem=2G,gres/gpu=2,gres/gpu:a100=2\n"
    "NodeName=cpu-1 CPUAlloc=0 CPUTot=64 Gres=(null) State=IDLE+DRAIN Partitions=cpu "
    "AllocTRES= Reason=Kill task failed [root@2026-11-29T17:00:00]\n"
    "NodeName=gh-2 CPUAlloc=0 CPUTot=72 Gres=gpu:gh200:1(S:0) State=IDLE* Partitions=gh,gh-dev\n"
)


def test_scontrol_nodes_parse_into_gpu_counts_and_health() -> None:
    gpu, cpu, gh = parse_nodes(SCONTROL)
    assert (gpu.gpu_type, gpu.gpus_total, gpu.gpus_alloc, gpu.cpus_alloc) == ("a100", 4, 2, 2)
    assert gpu.healthy
    assert (cpu.gpu_type, cpu.gpus_total, cpu.healthy) == (None, 0, False)
    assert cpu.reason.startswith("Kill task failed")
    assert (gh.gpu_type, gh.gpus_total, gh.partitions, gh.healthy) == (
        "gh200",
        1,
        ("gh", "gh-dev"),
        False,
    )


def test_a_second_instance_has_the_same_clusters_on_ports_no_first_instance_daemon_uses(
    profiles: dict[str, SiteProfile], plan: FederationPlan
) -> None:
    second = plan_federation(
        profiles.values(), Path("/devfed-test-2"), "testhost", Instance(2, ROOT)
    )
    assert [c.name for c in second.clusters] == [c.name for c in plan.clusters]

    def ports(p: FederationPlan) -> set[int]:
        nodes = {n.port for c in p.clusters for n in c.nodes}
        return {*nodes, *(c.ctld_port for c in p.clusters), p.dbd_port, p.mysql_port}

    assert not ports(plan) & ports(second)
    assert second.dbd_port == DBD_PORT + PORT_STRIDE
    cluster = second.clusters[0]
    conf = _conf(second, cluster)
    assert conf["AccountingStoragePort"] == str(second.dbd_port)
    assert conf["SlurmctldPort"] == str(CTLD_PORT_BASE + PORT_STRIDE)
    dbd = render_slurmdbd_conf(second, "pw")
    assert f"DbdPort={second.dbd_port}\n" in dbd
    assert f"StoragePort={second.mysql_port}\n" in dbd


def test_an_instance_folder_records_which_instance_it_holds(tmp_path: Path) -> None:
    primary = tmp_path / "fed"
    assert read_instance(primary) == Instance()  # nothing recorded: instance 1
    roots = [instance_root(primary, n) for n in (1, 2, 3)]
    assert roots == [primary, tmp_path / "fed-2", tmp_path / "fed-3"]
    for n, root in reversed(list(enumerate(roots, 1))):
        root.mkdir()
        write_instance(root, Instance(n, primary if n > 1 else None))
    assert read_instance(roots[2]) == Instance(3, primary)
    assert read_instance(primary) == Instance()
    (tmp_path / "fed-9").mkdir()  # no instance file: not one of ours
    assert instances_of(primary) == (roots[1], roots[2])
    assert instances_of(roots[1]) == ()
