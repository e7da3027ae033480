"""Slurm discovery: the commands that describe a cluster, and their parser. Pure.

Partitions and limits from `scontrol show partition`, node shapes (CPUs, memory, GRES GPU type
and count) from `scontrol show node`, the user's associations (account x partition x QoS, with
MaxJobs/MaxSubmit/MaxWall) and the QoS table from `sacctmgr`.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping

from fedhpc.adapters.command import BatchSection, Command, CommandResult
from fedhpc.adapters.dialects.facts import (
    AssociationFacts,
    ClusterFacts,
    PartitionFacts,
    login_command,
    parse_login,
)
from fedhpc.adapters.dialects.slurm_probe import NodeRecord, parse_billing_weights, parse_nodes
from fedhpc.domain.billing import billing_per_hour, gpu_weight
from fedhpc.domain.units import parse_duration

__all__ = [
    "ASSOC_FIELDS",
    "QOS_FIELDS",
    "billing_per_hour",
    "discover_sections",
    "gpu_weight",
    "parse_associations",
    "parse_billing_weights",
    "parse_discovery",
    "parse_partitions",
    "parse_qos",
    "ping_command",
    "ping_problem",
    "slurm_time_s",
]

ASSOC_FIELDS = "Cluster,Account,User,Partition,QOS,DefaultQOS,MaxJobs,MaxSubmit,MaxWall"
QOS_FIELDS = "Name,MaxWall,MaxJobsPU,MaxSubmitPU"
# The session's own user, asked at the site: the name fedhpc logs in as may differ locally.
_ASSOC_SCRIPT = f'sacctmgr -nP show assoc where user="$(id -un)" format={ASSOC_FIELDS}'


def ping_command() -> Command:
    """Does the controller answer? `scontrol ping` says DOWN at once when nothing listens; a
    missing slurm.conf makes Slurm retry for a minute, so the caller bounds it."""
    return Command(("scontrol", "ping"), timeout_s=20.0)


def ping_problem(result: CommandResult) -> str | None:
    """None when the controller answered, else what is wrong in one line."""
    text = (result.stdout + result.stderr).strip()
    if result.returncode == 127:
        return "scontrol is not on the PATH"
    if "is UP" in text and result.returncode == 0:
        return None
    if "cannot stat file" in text or "s_p_parse_file" in text:
        return "slurm.conf cannot be read (" + text.splitlines()[0][:200] + ")"
    if "DOWN" in text:
        return "slurmctld does not answer (scontrol ping: DOWN)"
    return text.splitlines()[-1][:200] if text else f"scontrol ping exited {result.returncode}"


def discover_sections() -> dict[str, Command]:
    """Every command discovery needs, run as one batch (one remote call)."""
    return {
        "config": Command(("scontrol", "show", "config")),
        "partitions": Command(("scontrol", "--oneliner", "show", "partition")),
        "nodes": Command(("scontrol", "--oneliner", "show", "node")),
        "assoc": Command(("bash", "-c", _ASSOC_SCRIPT)),
        "qos": Command(("sacctmgr", "-nP", "show", "qos", f"format={QOS_FIELDS}")),
        "login": login_command(),
    }


_UNSET = {"", "UNLIMITED", "INFINITE", "NONE", "N/A", "(null)"}


def slurm_time_s(value: str) -> int | None:
    """Seconds from Slurm's time format; None for UNLIMITED/NONE/blank or anything unreadable."""
    text = value.strip()
    if text.upper() in _UNSET:
        return None
    try:
        return parse_duration(text)
    except ValueError:
        return None


def _count(value: str) -> int | None:
    text = value.strip()
    return int(text) if text.isdigit() else None


def _names(value: str) -> tuple[str, ...]:
    return tuple(sorted({v for v in value.split(",") if v.strip() and v.upper() not in _UNSET}))


_KV = re.compile(r"(\w+)=(\S*)")


def parse_qos(text: str) -> dict[str, dict[str, int | None]]:
    """`sacctmgr -nP show qos format=Name,MaxWall,MaxJobsPU,MaxSubmitPU` -> name: limits."""
    out: dict[str, dict[str, int | None]] = {}
    for line in text.splitlines():
        fields = line.split("|")
        if len(fields) < 4 or not fields[0].strip():
            continue
        out[fields[0].strip()] = {
            "max_wall_s": slurm_time_s(fields[1]),
            "max_jobs": _count(fields[2]),
            "max_submit": _count(fields[3]),
        }
    return out


def parse_associations(text: str, cluster: str | None) -> tuple[AssociationFacts, ...]:
    """The user's associations on `cluster` (every cluster when it is unknown). The Slurm
    `root` account is the top of the account tree, not an allocation, and is left out."""
    out: list[AssociationFacts] = []
    seen: set[tuple[str, str | None]] = set()
    for line in text.splitlines():
        fields = line.split("|")
        if len(fields) < 9:
            continue
        clus, account, user = (f.strip() for f in fields[:3])
        if not user or not account or account == "root":
            continue
        if cluster and clus and clus != cluster:
            continue
        partition = fields[3].strip() or None
        if (account, partition) in seen:
            continue
        seen.add((account, partition))
        out.append(
            AssociationFacts(
                account=account,
                partition=partition,
                qos=_names(fields[4]),
                default_qos=fields[5].strip() or None,
                max_jobs=_count(fields[6]),
                max_submit=_count(fields[7]),
                max_wall_s=slurm_time_s(fields[8]),
            )
        )
    return tuple(out)


def _shape(node: NodeRecord) -> tuple[int, int, str | None, int]:
    gpu_type = next(iter(sorted(node.gpus_by_type_total)), None)
    return (node.cpus_total, node.mem_total_mib, gpu_type, node.gpus_total)


def _describe(shape: tuple[int, int, str | None, int], count: int) -> str:
    cpus, mem, gtype, gpus = shape
    gpu = f", {gpus}x {gtype or 'gpu'}" if gpus else ""
    return f"{count} node(s) of {cpus} CPUs, {mem} MiB{gpu}"


def _arch(nodes: list[NodeRecord]) -> str | None:
    """A node's architecture: a feature naming one (what the centers and devfed tag), else
    the Arch slurmd reported."""
    for n in nodes:
        for feature in n.features:
            if feature in ("x86_64", "aarch64"):
                return feature
    arches = Counter(n.arch for n in nodes if n.arch)
    return arches.most_common(1)[0][0] if arches else None


def parse_partitions(
    partitions_text: str, nodes_text: str, qos: Mapping[str, Mapping[str, int | None]]
) -> tuple[PartitionFacts, ...]:
    """Partitions with the shape of their most common node, limits from the partition and its
    QoS (the tighter wall time of the two)."""
    nodes = parse_nodes(nodes_text)
    out: list[PartitionFacts] = []
    for line in partitions_text.splitlines():
        if not line.startswith("PartitionName="):
            continue
        f = dict(_KV.findall(line))
        name = f["PartitionName"]
        members = [n for n in nodes if name in n.partitions]
        shapes = Counter(_shape(n) for n in members)
        if not shapes:
            continue  # a partition without nodes cannot run anything
        (cpus, mem, gtype, gpus), count = shapes.most_common(1)[0]
        others = tuple(_describe(s, c) for s, c in shapes.most_common()[1:])
        part_qos = f.get("QoS", "").strip()
        part_qos = None if part_qos.upper() in _UNSET else part_qos
        limits = qos.get(part_qos or "", {})
        walls = [w for w in (slurm_time_s(f.get("MaxTime", "")), limits.get("max_wall_s")) if w]
        allow = f.get("AllowQos", "ALL")
        max_nodes = _count(f.get("MaxNodes", ""))
        out.append(
            PartitionFacts(
                name=name,
                cpus=cpus,
                memory_mib=mem,
                nodes=count,
                gpu_type=gtype,
                gpus=gpus,
                max_wall_s=min(walls) if walls else None,
                default_wall_s=slurm_time_s(f.get("DefaultTime", "")),
                max_nodes=max_nodes,
                min_nodes=_count(f.get("MinNodes", "")) or 1,
                allowed_qos=() if allow.upper() == "ALL" else _names(allow),
                qos=part_qos,
                max_jobs_per_user=limits.get("max_jobs"),
                max_submit_per_user=limits.get("max_submit"),
                arch=_arch(members),
                available=f.get("State", "UP").upper() == "UP",
                preemptible=f.get("PreemptMode", "OFF").upper() not in ("OFF", ""),
                other_shapes=others,
                billing_weights=parse_billing_weights(f.get("TRESBillingWeights", "")),
            )
        )
    return tuple(out)


def _cluster_name(text: str) -> str | None:
    for line in text.splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "ClusterName":
            return value.strip() or None
    return None


def _ok(section: BatchSection | None) -> bool:
    return section is not None and section.returncode == 0


def _problem(name: str, section: BatchSection | None) -> str:
    """A failed optional section, said to the person; sacctmgr's (assoc, qos) with why, since
    the accounts fedhpc proposes come from it: not installed, or refused / no database."""
    if name not in ("assoc", "qos") or section is None:
        return name
    if section.returncode == 127:
        return f"{name} (sacctmgr is not on the site's PATH)"
    return (
        f"{name} (sacctmgr exited {section.returncode}: the accounting database refused "
        "the query or did not answer)"
    )


def parse_discovery(sections: Mapping[str, BatchSection]) -> ClusterFacts:
    """ClusterFacts from the batch's sections; a failed optional section is named in
    `problems`, never guessed around. Raises ValueError when the partitions or nodes failed."""
    core = [n for n in ("partitions", "nodes") if not _ok(sections.get(n))]
    if core:
        raise ValueError(f"slurm did not answer: {', '.join(core)} failed")
    problems = [
        _problem(n, sections.get(n))
        for n in ("config", "assoc", "qos", "login")
        if not _ok(sections.get(n))
    ]
    cluster = _cluster_name(sections["config"].stdout) if _ok(sections.get("config")) else None
    qos = parse_qos(sections["qos"].stdout) if _ok(sections.get("qos")) else {}
    assoc = sections.get("assoc")
    return ClusterFacts(
        dialect="slurm",
        cluster=cluster,
        partitions=parse_partitions(sections["partitions"].stdout, sections["nodes"].stdout, qos),
        associations=parse_associations(assoc.stdout, cluster) if _ok(assoc) and assoc else (),
        qos_names=tuple(sorted(qos)),
        login=parse_login(sections.get("login")),
        problems=tuple(problems),
    )
