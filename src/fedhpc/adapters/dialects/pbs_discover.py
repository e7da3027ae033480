"""PBS Pro discovery: execution queues with their limits (`qstat -Q -f -F json`) and the shapes of
the vnodes that serve them (`pbsnodes -a -F json`). Pure. PBS keeps no account associations:
projects are the center's (e.g. ALCF `sbank`), so the person names them."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from typing import Any

from fedhpc.adapters.command import BatchSection, Command, CommandResult
from fedhpc.adapters.dialects import pbs_lsf_util as util
from fedhpc.adapters.dialects.facts import ClusterFacts, PartitionFacts, login_command, parse_login
from fedhpc.adapters.dialects.pbs_lsf_util import as_int, load_json, size_mib
from fedhpc.adapters.dialects.pbs_parse import in_queue, queue_selectors
from fedhpc.domain.units import parse_duration

__all__ = ["discover_sections", "parse_discovery", "ping_command", "ping_problem"]


def ping_command() -> Command:
    """`qstat -B`: the server's status line, or an error when pbs_server does not answer."""
    return Command(("qstat", "-B"), timeout_s=20.0)


def ping_problem(result: CommandResult) -> str | None:
    return util.ping_problem(result, ping_command().argv)


def discover_sections() -> dict[str, Command]:
    return {
        "queues": Command(("qstat", "-Q", "-f", "-F", "json")),
        "nodes": Command(("pbsnodes", "-a", "-F", "json")),
        "login": login_command(),
    }


def _seconds(value: object) -> int | None:
    if value in (None, ""):
        return None
    try:
        return parse_duration(str(value))
    except ValueError:
        return None


_PER_USER = re.compile(r"\[u:PBS_GENERIC=(\d+)\]")


def _per_user(value: object) -> int | None:
    m = _PER_USER.search(str(value or ""))
    return int(m.group(1)) if m else None


def _shape(node: dict[str, Any]) -> tuple[int, int, str | None, int]:
    avail = node.get("resources_available", {}) or {}
    gpus = as_int(avail.get("ngpus"))
    gtype = avail.get("gpu_model") or avail.get("gpu_type")
    return (
        as_int(avail.get("ncpus")) or as_int(node.get("pcpus")),
        size_mib(avail.get("mem", "0"), bare_unit="b"),
        str(gtype).lower() if gpus and gtype else None,
        gpus,
    )


def _queue(name: str, q: dict[str, Any], nodes: dict[str, dict[str, Any]]) -> PartitionFacts | None:
    selectors = queue_selectors(q)
    members = [n for n in nodes.values() if in_queue(n, name, selectors)]
    shapes = Counter(_shape(n) for n in members)
    if not shapes:
        return None
    (cpus, mem, gtype, gpus), count = shapes.most_common(1)[0]
    rmax = q.get("resources_max", {}) or {}
    rdef = q.get("resources_default", {}) or {}
    others = tuple(
        f"{c} node(s) of {s[0]} CPUs, {s[1]} MiB, {s[3]} GPU(s)"
        for s, c in shapes.most_common()[1:]
    )
    arches = Counter(str((n.get("resources_available", {}) or {}).get("arch", "")) for n in members)
    arch = next((a for a, _ in arches.most_common() if a in ("x86_64", "aarch64")), None)
    return PartitionFacts(
        name=name,
        cpus=cpus,
        memory_mib=mem,
        nodes=count,
        gpu_type=gtype,
        gpus=gpus,
        max_wall_s=_seconds(rmax.get("walltime")),
        default_wall_s=_seconds(rdef.get("walltime")),
        max_nodes=as_int(rmax.get("nodect")) or None,
        min_nodes=as_int((q.get("resources_min", {}) or {}).get("nodect")) or 1,
        max_jobs_per_user=_per_user(q.get("max_run")),
        max_submit_per_user=_per_user(q.get("max_queued")),
        arch=arch,
        available=str(q.get("enabled")) == "True" and str(q.get("started")) == "True",
        other_shapes=others,
    )


def _ok(section: BatchSection | None) -> bool:
    return section is not None and section.returncode == 0


def parse_discovery(sections: Mapping[str, BatchSection]) -> ClusterFacts:
    """Execution queues served by at least one vnode; routing queues are named in problems
    (jobs submitted there are forwarded to an execution queue listed here)."""
    queues_sec, nodes_sec = sections.get("queues"), sections.get("nodes")
    queues = load_json(queues_sec.stdout) if _ok(queues_sec) and queues_sec else None
    nodes = load_json(nodes_sec.stdout) if _ok(nodes_sec) and nodes_sec else None
    if queues is None or nodes is None:
        failed = [n for n, d in (("queues", queues), ("nodes", nodes)) if d is None]
        raise ValueError(f"pbs did not answer: {', '.join(failed)} failed")
    node_map = {k: v for k, v in (nodes.get("nodes") or {}).items() if isinstance(v, dict)}
    parts: list[PartitionFacts] = []
    routing: list[str] = []
    for name, q in (queues.get("Queue") or {}).items():
        if not isinstance(q, dict):
            continue
        if q.get("queue_type") != "Execution":
            routing.append(name)
            continue
        if (facts := _queue(name, q, node_map)) is not None:
            parts.append(facts)
    problems = [] if _ok(sections.get("login")) else ["login"]
    if routing:
        problems.append(f"routing queues not profiled: {', '.join(sorted(routing))}")
    return ClusterFacts(
        dialect="pbs",
        cluster=str(queues.get("pbs_server") or "") or None,
        partitions=tuple(parts),
        login=parse_login(sections.get("login")),
        problems=tuple(problems),
    )
