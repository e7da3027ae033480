"""What a Slurm partition charges (issue 42): `TRESBillingWeights` read from
`scontrol show partition -o` (slurm.conf(5)) and the billing units an allocation costs."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedhpc.adapters.dialects.slurm_discover import (
    billing_per_hour,
    gpu_weight,
    parse_billing_weights,
    parse_partitions,
)

FIX = Path(__file__).parent.parent / "fixtures" / "slurm"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("CPU=1.0,Mem=0.25G,GRES/gpu=2.0", (("CPU", 1.0), ("GRES/gpu", 2.0), ("Mem", 0.25))),
        ("CPU=0.5,Mem=1", (("CPU", 0.5), ("Mem", 1024.0))),  # memory per MB by default
        ("Mem=2048K,GRES/gpu:a100=4", (("GRES/gpu:a100", 4.0), ("Mem", 2048.0 * 1024 * 1024))),
        ("Mem=1T", (("Mem", 1.0 / 1024),)),
        ("", ()),
        ("CPU=x,GRES/gpu=,=3,Mem=1Q", ()),  # nothing parsable
    ],
)
def test_billing_weights_parse_with_memory_per_gib(
    value: str, expected: tuple[tuple[str, float], ...]
) -> None:
    assert parse_billing_weights(value) == expected


def test_an_allocation_costs_the_weighted_sum_of_its_tres() -> None:
    w = parse_billing_weights("CPU=1.0,Mem=0.25G,GRES/gpu=16.0")
    # 2 nodes x (8 CPUs + 64 GiB x 0.25 + 2 GPUs x 16) = 2 x 56
    assert billing_per_hour(w, cpus=8, memory_mib=64 * 1024, gpus=2, nodes=2) == 112.0
    assert billing_per_hour((), cpus=8, memory_mib=1024, gpus=1, nodes=1) == 0.0


@pytest.mark.parametrize(
    ("value", "gpu_type", "per_gpu"),
    [
        ("GRES/gpu=2.0,GRES/gpu:a100=3.0", "a100", 3.0),  # its type's weight, not 2 + 3
        ("GRES/gpu=2.0,GRES/gpu:a100=3.0", "a40", 2.0),  # another type's weight is not its
        ("GRES/gpu=2.0,GRES/gpu:a100=3.0", None, 2.0),
        ("GRES/gpu:a100=3.0", None, 3.0),  # the only typed weight, type unknown
        ("GRES/gpu:a100=3.0,GRES/gpu:h100=5.0", None, 0.0),  # which one: unknown
        ("GRES/gpu:A100=3.0", "a100", 3.0),
        ("CPU=1.0", "a100", 0.0),
    ],
)
def test_a_gpu_is_billed_once_at_one_weight(
    value: str, gpu_type: str | None, per_gpu: float
) -> None:
    w = parse_billing_weights(value)
    assert gpu_weight(w, gpu_type) == per_gpu
    cost = billing_per_hour(w, cpus=0, memory_mib=0, gpus=4, nodes=2, gpu_type=gpu_type)
    assert cost == 2 * 4 * per_gpu


def test_discovery_reads_each_partitions_weights_and_none_where_unset() -> None:
    partitions = (FIX / "scontrol_show_partition.txt").read_text()
    nodes = (FIX / "scontrol_show_node.txt").read_text()
    plain = parse_partitions(partitions, nodes, {})
    assert plain and all(p.billing_weights == () for p in plain)  # the devfed sets none
    first = partitions.splitlines()[0]
    weighted = first.replace(" State=UP", " TRESBillingWeights=CPU=1.0,GRES/gpu=8.0 State=UP")
    (gh, *_) = parse_partitions("\n".join([weighted, *partitions.splitlines()[1:]]), nodes, {})
    assert gh.name == plain[0].name
    assert gh.billing_weights == (("CPU", 1.0), ("GRES/gpu", 8.0))


def test_a_discovered_profile_charges_what_the_billing_weights_say() -> None:
    from fedhpc.adapters.command import BatchSection
    from fedhpc.adapters.dialects.slurm_discover import parse_discovery
    from fedhpc.domain.site import TransportSpec
    from fedhpc.onboard.build import build_discovery

    partitions = (FIX / "scontrol_show_partition.txt").read_text().splitlines()
    partitions[0] = partitions[0].replace(
        " State=UP", " TRESBillingWeights=CPU=1.0,GRES/gpu=8.0 State=UP"
    )
    sections = {
        "config": "ClusterName             = devvista\n",
        "partitions": "\n".join(partitions) + "\n",
        "nodes": (FIX / "scontrol_show_node.txt").read_text(),
        "assoc": (FIX / "sacctmgr_assoc.txt").read_text(),
        "qos": (FIX / "sacctmgr_qos.txt").read_text(),
        "login": "user=root\narch=x86_64\nstorage.HOME=/root\nruntime=apptainer\n",
    }
    facts = parse_discovery({k: BatchSection(k, 0, v) for k, v in sections.items()})
    local = TransportSpec(kind="local", env={"SLURM_CONF": "/etc/slurm/slurm.conf"})
    found = build_discovery(facts, name="devvista", transport=local)
    gh_facts = facts.partitions[0]
    gh = found.profile.partition(gh_facts.name)
    assert gh is not None and gh.charge is not None
    # one node: its CPUs x 1.0 + its GPUs x 8.0 billing units an hour, shared per GPU
    expected = (gh_facts.cpus * 1.0 + gh_facts.gpus * 8.0) / gh_facts.gpus
    assert gh.charge.kind.value == "gpu-hours" and gh.charge.rate == round(expected, 4)
    (charge,) = [c for c in found.confirm if c.field == "charge"]
    assert "TRESBillingWeights" in charge.why and gh_facts.name in charge.why
    # The daemon's probe reads the weights again: the discovered charges follow them, the
    # site's guessed one too, until the person states the center's figure.
    assert gh.charge.follow_scheduler and found.profile.charge.follow_scheduler
    assert "follow_scheduler = false" in charge.why
    assert "do not know what a center charges" not in charge.why
