"""PBS Pro and LSF discovery on recorded output (tests/fixtures/pbs, tests/fixtures/lsf)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedhpc.adapters.command import BatchSection, CommandResult
from fedhpc.adapters.dialects import lsf_discover, pbs_discover
from fedhpc.domain.site import TransportSpec
from fedhpc.onboard.build import build_discovery
from fedhpc.onboard.render import profile_toml
from fedhpc.profiles import load_profile

FIX = Path(__file__).parent.parent / "fixtures"
SSH = TransportSpec(kind="ssh", host="login.example.edu")


def _sec(name: str, path: str, rc: int = 0) -> BatchSection:
    return BatchSection(name, rc, (FIX / path).read_text())


def test_pbs_queues_shapes_and_limits(tmp_path: Path) -> None:
    facts = pbs_discover.parse_discovery(
        {
            "queues": _sec("queues", "pbs/qstat_queues.json"),
            "nodes": _sec("nodes", "pbs/pbsnodes.json"),
        }
    )
    assert facts.dialect == "pbs" and facts.cluster == "pbs01"
    by = {p.name: p for p in facts.partitions}
    gpu = by["gpu"]
    assert (gpu.cpus, gpu.gpus, gpu.max_wall_s, gpu.default_wall_s) == (64, 4, 86400, 3600)
    assert gpu.memory_mib == 512 * 1024 and gpu.max_jobs_per_user == 8
    assert by["cpu"].max_wall_s == 48 * 3600 and by["cpu"].gpus == 0
    found = build_discovery(facts, name="pbsite", transport=SSH)
    acc = found.profile.partition("gpu").node.accelerator
    assert acc is not None and acc.count == 4
    fields = {c.field for c in found.confirm}
    assert "partitions.gpu.node.accelerator" in fields  # untyped GPUs: the person names them
    assert "sites.accounts" in fields  # PBS lists no associations
    path = tmp_path / "pbsite.toml"
    path.write_text(profile_toml(found.profile, found.confirm))
    assert load_profile(path) == found.profile


def test_lsf_queues_hosts_and_limits(tmp_path: Path) -> None:
    facts = lsf_discover.parse_discovery(
        {
            "queues": _sec("queues", "lsf/bqueues_l.txt"),
            "groups": _sec("groups", "lsf/bmgroup.txt"),
            "hosts": _sec("hosts", "lsf/lshosts_w.txt"),
            "gpus": _sec("gpus", "lsf/bhosts_gpu.json"),
        }
    )
    by = {p.name: p for p in facts.partitions}
    gpu = by["gpu"]
    assert (gpu.nodes, gpu.cpus, gpu.gpus, gpu.max_wall_s) == (6, 64, 4, 1440 * 60)
    assert gpu.memory_mib == 512 * 1024 and gpu.arch == "x86_64"
    cpu = by["cpu"]  # HOSTS: cpu01 cpu02+2 ~gpu01
    assert (cpu.nodes, cpu.cpus, cpu.gpus, cpu.max_wall_s) == (2, 128, 0, None)
    assert by["debug"].available is False  # Closed:Inact
    assert by["debug"].nodes == 2  # all ~gpu_hosts/
    found = build_discovery(facts, name="lsfsite", transport=SSH)
    assert "partitions.cpu.max_wall_s" in {c.field for c in found.confirm}
    path = tmp_path / "lsfsite.toml"
    path.write_text(profile_toml(found.profile, found.confirm))
    assert load_profile(path) == found.profile


@pytest.mark.parametrize("module", [pbs_discover, lsf_discover])
def test_failed_core_sections_raise(module: object) -> None:
    with pytest.raises(ValueError, match="did not answer"):
        module.parse_discovery({})  # type: ignore[attr-defined]


def test_pings() -> None:
    assert pbs_discover.ping_problem(CommandResult(0, "Server Max ...", "")) is None
    down = CommandResult(2, "", "Connection refused\nqstat: cannot connect to server pbs01\n")
    assert pbs_discover.ping_problem(down) == "qstat: cannot connect to server pbs01"
    assert lsf_discover.ping_problem(CommandResult(127, "", "")) == "lsid is not on the PATH"
