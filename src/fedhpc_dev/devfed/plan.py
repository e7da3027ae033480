"""The local test federation as data: clusters, nodes, ports and paths from the devfed profiles."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from fedhpc.domain.site import SiteProfile

__all__ = [
    "ACCOUNTS",
    "CTLD_PORT_BASE",
    "DBD_PORT",
    "MYSQL_PORT",
    "PORTS_PER_CLUSTER",
    "PORT_STRIDE",
    "ClusterPlan",
    "FederationPlan",
    "Instance",
    "NodePlan",
    "PartitionPlan",
    "plan_federation",
]

# Fixed ports so a developer can reach any cluster without reading a file; cluster i (sorted by
# name) owns [CTLD_PORT_BASE + 20 i, +20): its slurmctld on the first, one slurmd per node after.
CTLD_PORT_BASE = 16900
PORTS_PER_CLUSTER = 20
DBD_PORT = 16819
MYSQL_PORT = 13306
ACCOUNTS = ("fedhpc-cpu", "fedhpc-gpu")
MARKER = ".fedhpc-devfed"
# Instance n (a second federation beside the first, same cluster names: the test suite runs one
# per Slurm worker) has every port of instance 1 plus PORT_STRIDE (n - 1).
PORT_STRIDE = 1000


@dataclass(frozen=True, slots=True)
class Instance:
    """Which federation a folder holds: instance 1, or instance n > 1 beside the one at
    `primary` (devpolaris, the OpenPBS cluster, lives in the primary's folder alone)."""

    number: int = 1
    primary: Path | None = None

    @property
    def port_shift(self) -> int:
        return PORT_STRIDE * (self.number - 1)


@dataclass(frozen=True, slots=True)
class NodePlan:
    """One pretend node: its own slurmd (`slurmd -N name`) on its own port."""

    name: str
    partition: str
    cpus: int
    memory_mib: int
    feature: str
    port: int
    gpu_type: str | None = None
    gpus: int = 0


@dataclass(frozen=True, slots=True)
class PartitionPlan:
    """A partition over its own nodes, so free GPUs per partition never overlap."""

    name: str
    nodes: tuple[str, ...]
    max_time_s: int
    default_time_s: int | None
    max_nodes: int
    min_nodes: int
    default: bool


@dataclass(frozen=True, slots=True)
class ClusterPlan:
    """One independent Slurm cluster under `{root}/{name}`."""

    name: str
    dir: Path
    ctld_port: int
    nodes: tuple[NodePlan, ...]
    partitions: tuple[PartitionPlan, ...]

    @property
    def conf(self) -> Path:
        return self.dir / "slurm.conf"

    @property
    def gres_conf(self) -> Path:
        return self.dir / "gres.conf"

    @property
    def log_dir(self) -> Path:
        return self.dir / "log"

    @property
    def run_dir(self) -> Path:
        return self.dir / "run"

    @property
    def ctld_pid(self) -> Path:
        return self.run_dir / "slurmctld.pid"

    def slurmd_pid(self, node: str) -> Path:
        return self.run_dir / f"slurmd-{node}.pid"

    def spool(self, node: str) -> Path:
        return self.dir / "spool" / node

    def gpu_links(self) -> tuple[Path, ...]:
        """Fake GPU device files, each to be a symlink to /dev/null (regular files are rejected)."""
        return tuple(
            self.dir / "dev" / n.name / f"gpu{i}" for n in self.nodes for i in range(n.gpus)
        )

    def gpu_types(self) -> tuple[str, ...]:
        return tuple(sorted({n.gpu_type for n in self.nodes if n.gpu_type}))

    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.conf)}


@dataclass(frozen=True, slots=True)
class FederationPlan:
    """Every cluster plus the daemons they share: one munged, one mariadbd, one slurmdbd."""

    root: Path
    hostname: str
    clusters: tuple[ClusterPlan, ...]
    instance: Instance = Instance()

    @property
    def dbd_port(self) -> int:
        return DBD_PORT + self.instance.port_shift

    @property
    def mysql_port(self) -> int:
        return MYSQL_PORT + self.instance.port_shift

    @property
    def marker(self) -> Path:
        return self.root / MARKER

    @property
    def run_dir(self) -> Path:
        return self.root / "run"

    @property
    def log_dir(self) -> Path:
        return self.root / "log"

    @property
    def munge_dir(self) -> Path:
        return self.root / "munge"

    @property
    def munge_socket(self) -> Path:
        return self.munge_dir / "munged.socket"

    @property
    def munge_key(self) -> Path:
        return self.munge_dir / "munge.key"

    @property
    def mysql_dir(self) -> Path:
        return self.root / "mariadb"

    @property
    def mysql_data(self) -> Path:
        return self.mysql_dir / "data"

    @property
    def mysql_socket(self) -> Path:
        return self.mysql_dir / "mysqld.sock"

    @property
    def dbd_dir(self) -> Path:
        return self.root / "dbd"

    @property
    def dbd_conf(self) -> Path:
        return self.dbd_dir / "slurmdbd.conf"

    @property
    def dbd_slurm_conf(self) -> Path:
        # slurmdbd finds slurmdbd.conf next to $SLURM_CONF; that slurm.conf need not exist.
        return self.dbd_dir / "slurm.conf"

    def pid_file(self, daemon: str) -> Path:
        return self.run_dir / f"{daemon}.pid"

    def log_file(self, daemon: str) -> Path:
        return self.log_dir / f"{daemon}.log"

    def cluster(self, name: str) -> ClusterPlan:
        for c in self.clusters:
            if c.name == name:
                return c
        raise KeyError(f"no devfed cluster {name!r}")


def _slug(partition: str) -> str:
    return re.sub(r"[^a-z0-9]", "", partition.lower())


def _plan_cluster(profile: SiteProfile, root: Path, ctld_port: int) -> ClusterPlan:
    nodes: list[NodePlan] = []
    parts: list[PartitionPlan] = []
    for index, spec in enumerate(profile.partitions):
        shape = spec.node
        acc = shape.accelerator
        names: list[str] = []
        for i in range(1, shape.count + 1):
            port = ctld_port + 1 + len(nodes)
            if port >= ctld_port + PORTS_PER_CLUSTER:
                raise ValueError(f"{profile.name}: more than {PORTS_PER_CLUSTER - 1} nodes")
            name = f"{_slug(spec.name)}-{i}"
            names.append(name)
            nodes.append(
                NodePlan(
                    name=name,
                    partition=spec.name,
                    cpus=shape.cpus,
                    memory_mib=shape.memory_mib,
                    feature=str(profile.arch_of(spec.name)),
                    port=port,
                    gpu_type=acc.gres_type if acc else None,
                    gpus=acc.count if acc else 0,
                )
            )
        parts.append(
            PartitionPlan(
                name=spec.name,
                nodes=tuple(names),
                max_time_s=spec.max_wall_s,
                default_time_s=spec.default_wall_s,
                max_nodes=spec.max_nodes_per_job,
                min_nodes=spec.min_nodes_per_job,
                default=index == 0,
            )
        )
    return ClusterPlan(profile.name, root / profile.name, ctld_port, tuple(nodes), tuple(parts))


def plan_federation(
    profiles: Iterable[SiteProfile], root: Path, hostname: str, instance: Instance = Instance()
) -> FederationPlan:
    """The Slurm federation of the `local_test` Slurm profiles, in name order with fixed ports
    (shifted for an `instance` past the first; the PBS one, devpolaris, is planned by
    `devfed.pbs`)."""
    local = sorted(
        (p for p in profiles if p.local_test and p.dialect == "slurm"), key=lambda p: p.name
    )
    base = CTLD_PORT_BASE + instance.port_shift
    clusters = tuple(
        _plan_cluster(p, root, base + i * PORTS_PER_CLUSTER) for i, p in enumerate(local)
    )
    return FederationPlan(root=root, hostname=hostname, clusters=clusters, instance=instance)
