"""LSF discovery: queues and their limits (`bqueues -l`), the hosts each queue uses (HOSTS,
resolved through `bmgroup -w`), host shapes (`lshosts -w`) and GPU counts (`bhosts -o ... -json`).
Pure. LSF lists no account associations: projects are the center's, so the person names them."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping

from fedhpc.adapters.command import BatchSection, Command, CommandResult
from fedhpc.adapters.dialects import pbs_lsf_util as util
from fedhpc.adapters.dialects.facts import ClusterFacts, PartitionFacts, login_command, parse_login
from fedhpc.adapters.dialects.lsf import GPU_FIELDS
from fedhpc.adapters.dialects.lsf_parse import group_members, hosts_per_queue, section_rows
from fedhpc.adapters.dialects.pbs_lsf_util import as_int, size_mib

__all__ = ["discover_sections", "parse_discovery", "ping_command", "ping_problem"]


def ping_command() -> Command:
    """`lsid`: the cluster and master names, or an error when LIM does not answer."""
    return Command(("lsid",), timeout_s=20.0)


def ping_problem(result: CommandResult) -> str | None:
    return util.ping_problem(result, ping_command().argv)


def discover_sections() -> dict[str, Command]:
    return {
        "cluster": Command(("lsid",)),
        "queues": Command(("bqueues", "-l")),
        "groups": Command(("bmgroup", "-w")),
        "hosts": Command(("lshosts", "-w")),
        "gpus": Command(("bhosts", "-o", GPU_FIELDS, "-json")),
        "login": login_command(),
    }


_RUNLIMIT = re.compile(r"^\s*([\d.]+)\s*min", re.MULTILINE)


def _blocks(text: str) -> dict[str, str]:
    """bqueues -l: each 'QUEUE: name' block's text."""
    out: dict[str, str] = {}
    for chunk in re.split(r"^QUEUE:\s*", text, flags=re.MULTILINE)[1:]:
        name, _, body = chunk.partition("\n")
        out[name.strip()] = body
    return out


def _queue_limits(body: str) -> tuple[int | None, int | None, bool]:
    """(RUNLIMIT seconds, JL/U, open and active) from one queue block."""
    wall = None
    if "RUNLIMIT" in body:
        m = _RUNLIMIT.search(body.split("RUNLIMIT", 1)[1])
        wall = int(float(m.group(1)) * 60) if m else None
    per_user = None
    active = True
    lines = body.splitlines()
    for i, line in enumerate(lines):
        if line.split()[:1] == ["PRIO"] and i + 1 < len(lines):
            header, values = line.split(), lines[i + 1].split()
            row = dict(zip(header, values, strict=False))
            per_user = as_int(row.get("JL/U"), 0) or None
            active = row.get("STATUS", "Open:Active") == "Open:Active"
    return wall, per_user, active


def _hosts(text: str) -> dict[str, tuple[int, int, str | None]]:
    """lshosts -w: host -> (ncpus, maxmem MiB, arch)."""
    out: dict[str, tuple[int, int, str | None]] = {}
    for line in text.splitlines()[1:]:
        cols = line.split()
        if len(cols) < 6:
            continue
        kind = cols[1].upper()
        arch = (
            "x86_64"
            if "X86_64" in kind
            else ("aarch64" if "ARM" in kind or "AARCH64" in kind else None)
        )
        out[cols[0]] = (as_int(cols[4]), size_mib(cols[5]) if cols[5] != "-" else 0, arch)
    return out


def _groups(text: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in text.splitlines()[1:]:
        cols = line.split()
        if len(cols) >= 2:
            out[cols[0]] = cols[1:]
    return out


def _ok(section: BatchSection | None) -> bool:
    return section is not None and (section.returncode == 0 or bool(section.stdout.strip()))


def parse_discovery(sections: Mapping[str, BatchSection]) -> ClusterFacts:
    core = [n for n in ("queues", "hosts") if not _ok(sections.get(n))]
    if core:
        raise ValueError(f"lsf did not answer: {', '.join(core)} failed")
    hosts = _hosts(sections["hosts"].stdout)
    gpus = {
        str(r.get("HOST_NAME")): as_int(r.get("NGPUS")) for r in section_rows(sections.get("gpus"))
    }
    groups = _groups(sections["groups"].stdout) if _ok(sections.get("groups")) else {}
    queue_hosts = hosts_per_queue(sections["queues"])
    parts: list[PartitionFacts] = []
    for name, body in _blocks(sections["queues"].stdout).items():
        members = sorted(group_members(queue_hosts.get(name, ["all"]), sorted(hosts), groups))
        shapes = Counter(
            (hosts[h][0], hosts[h][1], gpus.get(h, 0), hosts[h][2]) for h in members if h in hosts
        )
        if not shapes:
            continue
        (cpus, mem, ngpus, arch), count = shapes.most_common(1)[0]
        wall, per_user, active = _queue_limits(body)
        parts.append(
            PartitionFacts(
                name=name,
                cpus=cpus,
                memory_mib=mem,
                nodes=count,
                gpus=ngpus,
                gpu_type=None,
                max_wall_s=wall,
                max_jobs_per_user=per_user,
                arch=arch,
                available=active,
                other_shapes=tuple(
                    f"{c} host(s) of {s[0]} CPUs, {s[1]} MiB, {s[2]} GPU(s)"
                    for s, c in shapes.most_common()[1:]
                ),
            )
        )
    cluster_sec = sections.get("cluster")
    cluster = None
    if cluster_sec is not None and cluster_sec.returncode == 0:
        m = re.search(r"My cluster name is (\S+)", cluster_sec.stdout)
        cluster = m.group(1) if m else None
    problems = [n for n in ("groups", "gpus", "login") if not _ok(sections.get(n))]
    return ClusterFacts(
        dialect="lsf",
        cluster=cluster,
        partitions=tuple(parts),
        login=parse_login(sections.get("login")),
        problems=tuple(problems),
    )
