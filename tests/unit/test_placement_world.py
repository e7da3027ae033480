"""Builders for placement tests (small hand-made sites and snapshots), and their own checks."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from fedhpc.domain import (
    Accelerator,
    AccountConfig,
    Arch,
    ChargeKind,
    ChargeModel,
    ContainerSupport,
    Credit,
    Health,
    NodeShape,
    NodeStateCounts,
    PartitionSpec,
    PartitionState,
    ResourceEnvelope,
    ResourceSnapshot,
    SiteProfile,
    SiteState,
    UserSiteConfig,
)
from fedhpc.domain.config import Site
from fedhpc.domain.site import Unread

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def env(**kw: Any) -> ResourceEnvelope:
    """An envelope from plain values: env(gpus=(1, 4), cpus=8, wall_time=("1h", "2h"))."""
    data: dict[str, Any] = {}
    for k, v in kw.items():
        if k in ("gpus", "cpus", "memory", "nodes", "wall_time"):
            lo, hi = v if isinstance(v, tuple) else (v, None)
            data[k] = {"min": lo, "max": hi} if hi is not None else {"min": lo}
        else:
            data[k] = v
    return ResourceEnvelope.model_validate(data)


def gpu_partition(
    name: str,
    acc: str = "a100",
    *,
    per_node: int = 4,
    memory_gib: float = 40,
    count: int = 2,
    cpus: int = 64,
    **kw: Any,
) -> PartitionSpec:
    return PartitionSpec(
        name=name,
        node=NodeShape(
            cpus=cpus,
            memory_mib=256 * 1024,
            count=count,
            accelerator=Accelerator(type=acc, memory_gib=memory_gib, count=per_node),
        ),
        max_wall_s=kw.pop("max_wall_s", 48 * 3600),
        **kw,
    )


def cpu_partition(name: str, *, cpus: int = 128, count: int = 4, **kw: Any) -> PartitionSpec:
    return PartitionSpec(
        name=name,
        node=NodeShape(cpus=cpus, memory_mib=256 * 1024, count=count),
        max_wall_s=kw.pop("max_wall_s", 48 * 3600),
        **kw,
    )


def profile(name: str, *partitions: PartitionSpec, **kw: Any) -> SiteProfile:
    return SiteProfile(
        name=name,
        dialect="slurm",
        arch=kw.pop("arch", Arch.X86_64),
        partitions=partitions,
        charge=kw.pop("charge", ChargeModel(kind=ChargeKind.GPU_HOURS)),
        containers=kw.pop("containers", ContainerSupport(runtimes=("apptainer",))),
        **kw,
    )


def site(p: SiteProfile, **user: Any) -> Site:
    accounts = tuple(
        AccountConfig(**a) if isinstance(a, dict) else a for a in user.pop("accounts", ())
    )
    return Site(p, UserSiteConfig(accounts=accounts, **user))


def pstate(name: str, spec: PartitionSpec | None = None, **kw: Any) -> PartitionState:
    """A partition's live state; free capacity defaults to 'everything idle' when spec is given."""
    if spec is not None:
        acc = spec.node.accelerator.count if spec.node.accelerator else 0
        free_gpus = kw.pop("free_gpus", acc * spec.node.count)
        base: dict[str, Any] = {
            "nodes": NodeStateCounts(idle=spec.node.count),
            "total_gpus": acc * spec.node.count,
            "free_gpus": free_gpus,
            "max_free_gpus_on_node": kw.pop("max_free_gpus_on_node", min(acc, free_gpus)),
            "total_cpus": spec.node.cpus * spec.node.count,
            "free_cpus": spec.node.cpus * spec.node.count,
            "max_free_cpus_on_node": spec.node.cpus,
            "free_memory_mib": spec.node.memory_mib * spec.node.count,
        }
        base.update(kw)
        kw = base
    return PartitionState(name=name, **kw)


def state(
    p: SiteProfile,
    *,
    age_s: float = 5,
    health: Health = Health.OK,
    accounts: tuple[str, ...] = ("proj",),
    credit: tuple[Credit, ...] = (),
    unread: tuple[Unread, ...] = (),
    **per_partition: dict[str, Any],
) -> SiteState:
    """A site's probe: every profile partition idle unless overridden by name."""
    parts = tuple(pstate(s.name, s, **per_partition.get(s.name, {})) for s in p.partitions)
    return SiteState(
        site=p.name,
        health=health,
        collected_at=NOW - timedelta(seconds=age_s),
        arch=p.arch,
        partitions=parts,
        accounts=accounts,
        credit=credit,
        unread=unread,
    )


def snapshot(*states: SiteState) -> ResourceSnapshot:
    return ResourceSnapshot(taken_at=NOW, sites={s.site: s for s in states})


def test_builders_make_an_idle_site_whose_free_capacity_is_every_node() -> None:
    p = profile("alpha", gpu_partition("a100", count=3))
    s = state(p)
    part = s.partitions[0]
    assert part.free_gpus == 12
    assert part.max_free_gpus_on_node == 4
    assert s.collected_at < NOW


def test_env_builder_reads_ranges_and_units() -> None:
    e = env(gpus=(1, 4), wall_time=("1h", "2h"), memory="16G")
    assert (e.gpus.min, e.gpus.upper, e.wall_time.upper, e.memory.min) == (1, 4, 7200, 16384)
