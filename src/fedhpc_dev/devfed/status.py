"""Read `scontrol show node -o` into node states and print the federation's status table."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = [
    "ClusterStatus",
    "FederationStatus",
    "NodeStatus",
    "format_status",
    "parse_nodes",
]

_FIELD = re.compile(r"(\w+)=(\S*)")
# Base states a node can take work in (scontrol(1) NODE STATE); flags after '+' or a trailing
# '*' (not responding) mark it unhealthy unless listed here.
_GOOD_BASE = {"IDLE", "MIXED", "ALLOCATED", "COMPLETING"}
_BAD_FLAGS = {"DRAIN", "DRAINING", "DRAINED", "DOWN", "FAIL", "NOT_RESPONDING", "INVAL"}


@dataclass(frozen=True, slots=True)
class NodeStatus:
    """One node as its controller sees it."""

    name: str
    state: str
    partitions: tuple[str, ...]
    cpus_alloc: int
    cpus_total: int
    gpu_type: str | None
    gpus_total: int
    gpus_alloc: int
    reason: str = ""

    @property
    def healthy(self) -> bool:
        if self.state.endswith("*"):
            return False
        base, *flags = self.state.split("+")
        return base in _GOOD_BASE and not (set(flags) & _BAD_FLAGS)


@dataclass(frozen=True, slots=True)
class ClusterStatus:
    """A cluster's controller and nodes; `nodes` is empty when the controller did not answer."""

    name: str
    controller_up: bool
    nodes: tuple[NodeStatus, ...] = ()
    missing_nodes: tuple[str, ...] = ()
    dead_slurmd: tuple[str, ...] = ()
    error: str = ""

    @property
    def healthy(self) -> bool:
        return (
            self.controller_up
            and not self.missing_nodes
            and not self.dead_slurmd
            and all(n.healthy for n in self.nodes)
        )


@dataclass(frozen=True, slots=True)
class FederationStatus:
    """The shared daemons (name to pid, None when down) and every cluster."""

    root: str
    daemons: Mapping[str, int | None]
    clusters: tuple[ClusterStatus, ...] = field(default=())

    @property
    def healthy(self) -> bool:
        return all(p is not None for p in self.daemons.values()) and all(
            c.healthy for c in self.clusters
        )


def _gres(value: str) -> tuple[str | None, int]:
    # "gpu:a100:4" or "gpu:a100:4(S:0-1)"; "(null)" when the node has none.
    for item in value.split(","):
        parts = item.split("(")[0].split(":")
        if parts[0] == "gpu" and len(parts) == 3 and parts[2].isdigit():
            return parts[1], int(parts[2])
    return None, 0


def _alloc_gpus(tres: str) -> int:
    for item in tres.split(","):
        key, _, value = item.partition("=")
        if key == "gres/gpu" and value.isdigit():
            return int(value)
    return 0


def parse_nodes(text: str) -> tuple[NodeStatus, ...]:
    """Nodes from `scontrol show node -o` (one node per line, `Key=Value` fields)."""
    out = []
    for line in text.splitlines():
        fields = dict(_FIELD.findall(line))
        if "NodeName" not in fields:
            continue
        gpu_type, gpus = _gres(fields.get("Gres", ""))
        reason = line.split(" Reason=", 1)[1] if " Reason=" in line else ""
        out.append(
            NodeStatus(
                name=fields["NodeName"],
                state=fields.get("State", "UNKNOWN"),
                partitions=tuple(p for p in fields.get("Partitions", "").split(",") if p),
                cpus_alloc=int(fields.get("CPUAlloc", "0") or 0),
                cpus_total=int(fields.get("CPUTot", "0") or 0),
                gpu_type=gpu_type,
                gpus_total=gpus,
                gpus_alloc=_alloc_gpus(fields.get("AllocTRES", "")),
                reason=reason.strip(),
            )
        )
    return tuple(out)


def format_status(status: FederationStatus) -> str:
    """The human table `fedhpc devfed status` prints."""
    lines = [f"devfed at {status.root}: {'healthy' if status.healthy else 'NOT healthy'}"]
    for name, pid in status.daemons.items():
        lines.append(f"  {name:<10} {'up (pid ' + str(pid) + ')' if pid else 'DOWN'}")
    for c in status.clusters:
        ctld = "up" if c.controller_up else f"DOWN ({c.error or 'no answer'})"
        lines.append(f"{c.name}: slurmctld {ctld}")
        if c.nodes:
            head = f"  {'partition':<18}{'node':<20}{'state':<14}{'cpus':>9}"
            lines.append(head + "  gpus used/total")
        for n in c.nodes:
            gpus = f"{n.gpu_type} {n.gpus_alloc}/{n.gpus_total}" if n.gpu_type else "-"
            cpus = f"{n.cpus_alloc}/{n.cpus_total}"
            part = ",".join(n.partitions)
            row = f"  {part:<18}{n.name:<20}{n.state.lower():<14}{cpus:>9}  {gpus}"
            lines.append(row + (f"  ({n.reason})" if n.reason and not n.healthy else ""))
        lines.extend(f"  node {n}: not known to slurmctld" for n in c.missing_nodes)
        lines.extend(f"  node {n}: slurmd not running" for n in c.dead_slurmd)
    return "\n".join(lines) + "\n"
