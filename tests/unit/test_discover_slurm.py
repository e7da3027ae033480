# ruff: noqa: E501 (recorded one-line scheduler output)
"""Slurm discovery's pure parts: recorded devfed output (tests/fixtures/slurm) and a center-like
layout (UNLIMITED limits, partition QoS, typed GRES with memory in the name, mixed node shapes,
per-partition associations) -> profile, config entry, TOML that reads back, diff."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedhpc.adapters.command import BatchSection
from fedhpc.adapters.dialects.slurm_discover import (
    discover_sections,
    parse_associations,
    parse_discovery,
    slurm_time_s,
)
from fedhpc.domain.site import TransportSpec
from fedhpc.onboard.build import build_discovery, gpu_model
from fedhpc.onboard.render import config_entry_toml, profile_diff, profile_toml
from fedhpc.profiles import load_profile
from fedhpc_dev.profiles import dev_profiles_dir

FIX = Path(__file__).parent.parent / "fixtures" / "slurm"
LOCAL = TransportSpec(kind="local", env={"SLURM_CONF": "/etc/slurm/slurm.conf"})


def _sec(name: str, text: str, rc: int = 0) -> BatchSection:
    return BatchSection(name, rc, text)


def _devvista() -> dict[str, BatchSection]:
    return {
        "config": _sec("config", "ClusterName             = devvista\n"),
        "partitions": _sec("partitions", (FIX / "scontrol_show_partition.txt").read_text()),
        "nodes": _sec("nodes", (FIX / "scontrol_show_node.txt").read_text()),
        "assoc": _sec("assoc", (FIX / "sacctmgr_assoc.txt").read_text()),
        "qos": _sec("qos", (FIX / "sacctmgr_qos.txt").read_text()),
        "login": _sec("login", "user=root\narch=x86_64\nstorage.HOME=/root\nruntime=apptainer\n"),
    }


def test_sections_are_one_batch_of_fixed_commands() -> None:
    sections = discover_sections()
    assert set(sections) == {"config", "partitions", "nodes", "assoc", "qos", "login"}
    assert sections["partitions"].argv == ("scontrol", "--oneliner", "show", "partition")


def test_recorded_devvista_matches_the_shipped_profile() -> None:
    facts = parse_discovery(_devvista())
    assert facts.cluster == "devvista"
    found = build_discovery(facts, name="devvista", transport=LOCAL)
    shipped = load_profile(dev_profiles_dir() / "devvista.toml")
    assert profile_diff(shipped, found.profile) == []
    gh = found.profile.partition("gh")
    assert (gh.node.count, gh.node.cpus, gh.node.memory_mib) == (2, 72, 96 * 1024)
    assert gh.node.accelerator is not None and gh.node.accelerator.type == "gh200"
    assert gh.max_nodes_per_job == 2 and gh.max_wall_s == 4 * 3600
    assert found.profile.arch.value == "aarch64"  # the node feature, not slurmd's x86_64
    # Only devvista's associations, never the Slurm root account.
    assert [a.name for a in found.user.accounts] == ["fedhpc-cpu", "fedhpc-gpu"]
    assert found.user.user == "root"
    assert found.profile.containers.runtimes == ("apptainer",)


def test_written_toml_reads_back_equal(tmp_path: Path) -> None:
    found = build_discovery(parse_discovery(_devvista()), name="devvista", transport=LOCAL)
    path = tmp_path / "devvista.toml"
    text = profile_toml(found.profile, found.confirm)
    path.write_text(text)
    assert load_profile(path) == found.profile
    assert "# CONFIRM" in text  # the charge, blocked partitions, runtimes, storage
    fields = {c.field for c in found.confirm}
    assert {"charge", "blocked_partitions", "containers.runtimes", "storage"} <= fields


# One record per line, as `scontrol --oneliner` prints them.
CENTER_PARTITIONS = """\
PartitionName=gpu AllowGroups=ALL AllowAccounts=ALL AllowQos=normal,long AllocNodes=ALL Default=YES QoS=gpuqos DefaultTime=00:30:00 MaxNodes=UNLIMITED MaxTime=2-00:00:00 MinNodes=0 Nodes=gpua[001-003] PreemptMode=OFF State=UP TotalCPUs=192 TotalNodes=3
PartitionName=cpu-preempt AllowQos=ALL QoS=N/A DefaultTime=NONE MaxNodes=16 MaxTime=UNLIMITED MinNodes=1 Nodes=cn[01-02] PreemptMode=REQUEUE State=UP
PartitionName=empty AllowQos=ALL QoS=N/A MaxTime=1:00:00 Nodes=(null) State=DOWN
"""
CENTER_NODES = """\
NodeName=gpua001 Arch=x86_64 CPUTot=64 RealMemory=257000 AvailableFeatures=rome,a100 Gres=gpu:nvidia_a100_80gb:4(S:0-1) State=IDLE Partitions=gpu CfgTRES=cpu=64,mem=257000M,gres/gpu=4,gres/gpu:nvidia_a100_80gb=4
NodeName=gpua002 Arch=x86_64 CPUTot=64 RealMemory=257000 AvailableFeatures=rome,a100 Gres=gpu:nvidia_a100_80gb:4(S:0-1) State=MIXED Partitions=gpu CfgTRES=cpu=64,mem=257000M,gres/gpu=4,gres/gpu:nvidia_a100_80gb=4
NodeName=gpua003 Arch=x86_64 CPUTot=128 RealMemory=515000 AvailableFeatures=rome,a100 Gres=gpu:nvidia_a100_80gb:8 State=IDLE Partitions=gpu CfgTRES=cpu=128,mem=515000M,gres/gpu=8,gres/gpu:nvidia_a100_80gb=8
NodeName=cn01 Arch=aarch64 CPUTot=128 RealMemory=240000 Gres=(null) State=IDLE Partitions=cpu-preempt
NodeName=cn02 Arch=aarch64 CPUTot=128 RealMemory=240000 Gres=(null) State=DOWN* Partitions=cpu-preempt
"""
CENTER_ASSOC = """\
big|abc123-gpu|me|gpu|long,normal|normal|10|50|1-00:00:00
big|abc123-cpu|me||normal|||||
other|xyz-gpu|me||normal||||
"""
CENTER_QOS = "normal||||\nlong|4-00:00:00|||\ngpuqos|1-00:00:00|8|20\n"


def _center() -> dict[str, BatchSection]:
    return {
        "config": _sec("config", "ClusterName             = big\n"),
        "partitions": _sec("partitions", CENTER_PARTITIONS),
        "nodes": _sec("nodes", CENTER_NODES),
        "assoc": _sec("assoc", CENTER_ASSOC),
        "qos": _sec("qos", CENTER_QOS),
        "login": _sec("login", "", rc=1),
    }


def test_center_layout_limits_qos_and_mixed_shapes() -> None:
    facts = parse_discovery(_center())
    assert [p.name for p in facts.partitions] == ["gpu", "cpu-preempt"]  # no-node one dropped
    assert facts.problems == ("login",)
    found = build_discovery(facts, name="big", transport=LOCAL)
    gpu = found.profile.partition("gpu")
    # The tighter of partition MaxTime (2 days) and its QoS's MaxWall (1 day).
    assert gpu.max_wall_s == 86400 and gpu.default_wall_s == 1800
    assert gpu.node.count == 2 and gpu.node.cpus == 64  # most common shape; the other noted
    assert "1 node(s) of 128 CPUs" in gpu.notes and "MaxSubmitPU=20" in gpu.notes
    assert gpu.max_nodes_per_job == 2  # UNLIMITED: bounded by the nodes of this shape
    assert gpu.qos == ("long", "normal") and gpu.default_qos == "gpuqos"
    assert gpu.max_jobs_per_user == 8
    acc = gpu.node.accelerator
    assert acc is not None and (acc.type, acc.memory_gib, acc.gres) == (
        "a100",
        80.0,
        "nvidia_a100_80gb",
    )
    cpu = found.profile.partition("cpu-preempt")
    assert cpu.max_wall_s == 86400  # UNLIMITED: a placeholder the person must confirm
    assert "partitions.cpu-preempt.max_wall_s" in {c.field for c in found.confirm}
    assert found.profile.blocked_partitions == ("cpu-preempt",)
    assert found.profile.arch.value == "x86_64"
    accounts = {a.name: a for a in found.user.accounts}
    assert set(accounts) == {"abc123-gpu", "abc123-cpu"}  # cluster 'other' is not this one
    assert accounts["abc123-gpu"].partitions == ("gpu",)
    assert accounts["abc123-gpu"].qos == "normal"
    assert accounts["abc123-cpu"].partitions == ()
    entry = config_entry_toml("big", found.user, found.qos_names)
    assert 'partitions = ["gpu"]' in entry and "[[sites.big.accounts]]" in entry


def test_associations_keep_limits() -> None:
    [gpu, *_] = parse_associations(CENTER_ASSOC, "big")
    assert (gpu.max_jobs, gpu.max_submit, gpu.max_wall_s) == (10, 50, 86400)


def test_failed_core_section_is_an_error_not_an_empty_profile() -> None:
    sections = _devvista()
    sections["nodes"] = _sec("nodes", "", rc=1)
    with pytest.raises(ValueError, match="nodes failed"):
        parse_discovery(sections)


@pytest.mark.parametrize(
    ("gres", "model", "memory", "sure"),
    [
        ("a100", "a100", 40.0, False),
        ("A40", "a40", 48.0, True),
        ("nvidia_h100_80gb_hbm3", "h100", 80.0, True),
        ("gh200", "gh200", 96.0, True),
        ("mi250x", "mi250x", 64.0, True),
        ("weird", "weird", None, False),
    ],
)
def test_gpu_models(gres: str, model: str, memory: float | None, sure: bool) -> None:
    assert gpu_model(gres) == (model, memory, sure)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("UNLIMITED", None), ("NONE", None), ("30:00", 1800), ("1-00:00:00", 86400), ("x", None)],
)
def test_slurm_times(text: str, seconds: int | None) -> None:
    assert slurm_time_s(text) == seconds


def test_diff_names_each_disagreement() -> None:
    found = build_discovery(parse_discovery(_devvista()), name="devvista", transport=LOCAL)
    shipped = load_profile(dev_profiles_dir() / "devdelta.toml")
    fields = {d.field for d in profile_diff(shipped, found.profile)}
    assert "partitions.gpuA100x4" in fields and "partitions.gh" in fields and "arch" in fields


@pytest.mark.parametrize(
    ("rc", "says"),
    [(127, "sacctmgr is not on the site's PATH"), (1, "sacctmgr exited 1: the accounting")],
)
def test_unreadable_associations_are_for_the_person_to_confirm(rc: int, says: str) -> None:
    sections = _devvista()
    sections["assoc"] = _sec("assoc", "", rc=rc)
    facts = parse_discovery(sections)
    [problem] = facts.problems
    assert problem.startswith("assoc (") and says in problem
    found = build_discovery(facts, name="devvista", transport=LOCAL)
    assert found.user.accounts == ()
    confirm = {c.field: c for c in found.confirm}["sites.accounts"]
    assert says in confirm.why and "sacctmgr show assoc" in confirm.look_up
    assert not any("lists no association" in n for n in found.notes)  # not "you have none"
    entry = config_entry_toml("devvista", found.user, found.qos_names)
    assert "# no association was read" in entry
