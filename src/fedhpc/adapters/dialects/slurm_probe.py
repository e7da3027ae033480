"""Slurm's batched capacity probe: nodes, partitions, queues, shares and balances -> SiteState."""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import datetime

from fedhpc.adapters.command import BatchSection
from fedhpc.adapters.dialects.base import OCCASIONAL_SECTION
from fedhpc.adapters.dialects.slurm_parse import map_state, none_if_blank
from fedhpc.domain.billing import BillingWeights
from fedhpc.domain.envelope import Arch
from fedhpc.domain.job import JobState
from fedhpc.domain.site import (
    Credit,
    Health,
    NodeStateCounts,
    PartitionState,
    SiteProfile,
    SiteState,
    Unread,
)

__all__ = [
    "NodeRecord",
    "parse_balances",
    "parse_billing_weights",
    "parse_nodes",
    "parse_partition_weights",
    "parse_probe",
]


@dataclass(frozen=True, slots=True)
class NodeRecord:
    """One line of `scontrol --oneliner show node`, reduced to what placement needs."""

    name: str
    state: str
    partitions: tuple[str, ...]
    arch: str | None
    features: tuple[str, ...]
    cpus_total: int
    cpus_alloc: int
    mem_total_mib: int
    mem_alloc_mib: int
    gpus_total: int
    gpus_alloc: int
    gpus_by_type_total: dict[str, int]
    gpus_by_type_alloc: dict[str, int]

    @property
    def usable(self) -> bool:
        """Nodes that can take new work: up, not draining, not failed, responding."""
        flags = set(re.split(r"[+*]", self.state.upper()))
        bad = {
            "DOWN",
            "DRAIN",
            "DRAINED",
            "DRAINING",
            "FAIL",
            "FAILING",
            "MAINT",
            "NOT_RESPONDING",
            "POWERED_DOWN",
            "POWER_DOWN",
            "POWERING_DOWN",
            "REBOOT_REQUESTED",
            "REBOOT_ISSUED",
            "INVAL",
            "FUTURE",
            "UNKNOWN",
        }
        return not (flags & bad) and "*" not in self.state


_KV = re.compile(r"(\w+)=(\S*)")


def _tres(text: str) -> tuple[int, dict[str, int]]:
    """gres/gpu totals from a TRES string such as 'cpu=64,gres/gpu=4,gres/gpu:a100=4'."""
    total, typed = 0, {}
    for item in text.split(","):
        key, _, val = item.partition("=")
        if key == "gres/gpu" and val.isdigit():
            total = int(val)
        elif key.startswith("gres/gpu:") and val.isdigit():
            typed[key.split(":", 1)[1]] = int(val)
    return total, typed


def _gres_types(gres: str) -> dict[str, int]:
    """'gpu:a100:4(S:0),gpu:a40:2' -> {'a100': 4, 'a40': 2}."""
    out: dict[str, int] = {}
    for item in re.sub(r"\([^)]*\)", "", gres).split(","):
        parts = item.split(":")
        if parts[0] == "gpu" and len(parts) == 3 and parts[2].isdigit():
            out[parts[1]] = out.get(parts[1], 0) + int(parts[2])
    return out


def _int(fields: dict[str, str], key: str) -> int:
    v = fields.get(key, "0")
    return int(v) if v.isdigit() else 0


def parse_nodes(text: str) -> list[NodeRecord]:
    nodes = []
    for line in text.splitlines():
        if not line.startswith("NodeName="):
            continue
        f = dict(_KV.findall(line))
        cfg_total, cfg_typed = _tres(f.get("CfgTRES", ""))
        alloc_total, alloc_typed = _tres(f.get("AllocTRES", ""))
        gres_typed = _gres_types(f.get("Gres", ""))
        if not cfg_typed:
            cfg_typed = gres_typed
        if not alloc_typed and len(cfg_typed) == 1:
            # One GPU type on the node: every allocated GPU is of that type.
            alloc_typed = {next(iter(cfg_typed)): alloc_total}
        nodes.append(
            NodeRecord(
                name=f.get("NodeName", "?"),
                state=f.get("State", "UNKNOWN"),
                partitions=tuple(p for p in f.get("Partitions", "").split(",") if p),
                arch=none_if_blank(f.get("Arch", "")),
                features=tuple(x for x in f.get("AvailableFeatures", "").split(",") if x),
                cpus_total=_int(f, "CPUTot"),
                cpus_alloc=_int(f, "CPUAlloc"),
                mem_total_mib=_int(f, "RealMemory"),
                mem_alloc_mib=_int(f, "AllocMem"),
                gpus_total=cfg_total or sum(cfg_typed.values()),
                gpus_alloc=alloc_total,
                gpus_by_type_total=cfg_typed,
                gpus_by_type_alloc=alloc_typed,
            )
        )
    return nodes


_MEM_PER_GIB = {"K": 1024.0 * 1024.0, "M": 1024.0, "G": 1.0, "T": 1.0 / 1024.0}


def parse_billing_weights(value: str) -> BillingWeights:
    """A partition's `TRESBillingWeights` (slurm.conf(5)): "CPU=1.0,Mem=0.25G,GRES/gpu=2.0"
    -> (("CPU", 1.0), ("GRES/gpu", 2.0), ("Mem", 0.25)), sorted by TRES. A memory weight is per
    MB unless suffixed K/M/G/T; it is returned per GiB. Unparsable entries are left out."""
    out: dict[str, float] = {}
    for item in value.split(","):
        tres, _, raw = item.strip().partition("=")
        if not tres or not raw:
            continue
        unit = raw[-1].upper() if raw[-1].isalpha() else "M"
        try:
            w = float(raw[:-1] if raw[-1].isalpha() else raw)
        except ValueError:
            continue
        if tres.lower() == "mem":
            if unit not in _MEM_PER_GIB:
                continue
            tres, w = "Mem", w * _MEM_PER_GIB[unit]
        out[tres] = w
    return tuple(sorted(out.items()))


def parse_partition_weights(text: str) -> dict[str, BillingWeights]:
    """`scontrol --oneliner show partition` -> each partition's billing weights (empty where
    it sets none)."""
    out: dict[str, BillingWeights] = {}
    for line in text.splitlines():
        if not line.startswith("PartitionName="):
            continue
        f = dict(_KV.findall(line))
        out[f["PartitionName"]] = parse_billing_weights(f.get("TRESBillingWeights", ""))
    return out


def _bucket(state: str) -> str:
    s = state.upper()
    if "DRAIN" in s:
        return "drain"
    if s.startswith("DOWN") or "NOT_RESPONDING" in s or "*" in s or "FAIL" in s:
        return "down"
    for name in ("idle", "mixed", "allocated"):
        if s.startswith(name.upper()) or (name == "allocated" and s.startswith("ALLOC")):
            return name
    return "other"


def _partition_state(
    name: str,
    nodes: list[NodeRecord],
    available: bool,
    queue: Counter[tuple[str, str, bool]],
    weights: BillingWeights = (),
) -> PartitionState:
    counts: Counter[str] = Counter(_bucket(n.state) for n in nodes)
    usable = [n for n in nodes if n.usable]
    free_by_type: dict[str, int] = defaultdict(int)
    for n in usable:
        for gtype, total in n.gpus_by_type_total.items():
            free_by_type[gtype] += max(0, total - n.gpus_by_type_alloc.get(gtype, 0))
    free_gpus = [max(0, n.gpus_total - n.gpus_alloc) for n in usable]
    free_cpus = [max(0, n.cpus_total - n.cpus_alloc) for n in usable]
    return PartitionState(
        name=name,
        nodes=NodeStateCounts(**{k: counts.get(k, 0) for k in NodeStateCounts.model_fields}),
        total_gpus=sum(n.gpus_total for n in nodes),
        free_gpus=sum(free_gpus),
        free_gpus_by_type=dict(free_by_type),
        total_cpus=sum(n.cpus_total for n in nodes),
        free_cpus=sum(free_cpus),
        free_memory_mib=sum(max(0, n.mem_total_mib - n.mem_alloc_mib) for n in usable),
        max_free_gpus_on_node=max(free_gpus, default=0),
        max_free_cpus_on_node=max(free_cpus, default=0),
        pending_jobs=queue[(name, "pending", False)] + queue[(name, "pending", True)],
        blocked_pending_jobs=queue[(name, "blocked", False)] + queue[(name, "blocked", True)],
        running_jobs=queue[(name, "running", False)] + queue[(name, "running", True)],
        user_pending_jobs=queue[(name, "pending", True)],
        user_running_jobs=queue[(name, "running", True)],
        available=available,
        billing_weights=weights,
    )


# Pending reasons (squeue %r) of jobs that cannot start whatever capacity is free: they are in
# the queue but not ahead of anyone. Limit reasons (AssocGrp*, QOSMax*...) are not here: the
# same limit may hold our own job back.
BLOCKED_REASONS = frozenset(
    {"Dependency", "DependencyNeverSatisfied", "JobHeldUser", "JobHeldAdmin", "BeginTime"}
)


def _queue_counts(text: str, user: str) -> Counter[tuple[str, str, bool]]:
    """(partition, pending|running|blocked, is_user) -> jobs, from `squeue --array -o
    %P|%T|%u|%r`; a blocked job is also counted as pending."""
    counts: Counter[tuple[str, str, bool]] = Counter()
    for line in text.splitlines():
        if line.count("|") < 2:
            continue
        partitions, native, owner, *rest = line.split("|", 3)
        if native.strip().startswith("COMPLETING"):
            # Ended, epilog running: its resources are (being) released, so counting it as
            # running could show a running job's GPUs free. Not ahead of anyone either.
            continue
        state = map_state(native)
        kind = {JobState.PENDING: "pending", JobState.RUNNING: "running"}.get(state)
        if kind is None:
            continue
        blocked = kind == "pending" and bool(rest) and rest[0].strip() in BLOCKED_REASONS
        # A job pending on several partitions counts in each of them.
        for part in partitions.split(","):
            counts[(part.strip(), kind, owner.strip() == user)] += 1
            if blocked:
                counts[(part.strip(), "blocked", owner.strip() == user)] += 1
    return counts


def _availability(text: str) -> dict[str, bool]:
    out: dict[str, bool] = {}
    for line in text.splitlines():
        if line.count("|") < 3:
            continue
        part, avail = line.split("|")[:2]
        out[part.strip().rstrip("*")] = avail.strip().lower() == "up"
    return out


def _credit(text: str, user: str, unit: str) -> tuple[tuple[str, ...], tuple[Credit, ...]]:
    """Accounts the user has an association with, and usage in billing-hours (RawUsage/3600)."""
    accounts: list[str] = []
    credit: list[Credit] = []
    for line in text.splitlines():
        fields = line.split("|")
        if len(fields) < 4 or fields[1].strip() != user:
            continue
        account = fields[0].strip()
        if not account or account in accounts:
            continue
        accounts.append(account)
        raw = fields[3].strip()
        used = int(raw) / 3600.0 if raw.isdigit() else None
        credit.append(Credit(account=account, used=used, unit=unit))
    return tuple(accounts), tuple(credit)


_NUMBER = re.compile(r"^-?\d+(?:\.\d+)?$")


def parse_balances(text: str) -> dict[str, float]:
    """Remaining allocation per account from a center's balance command (Anvil `mybalance`,
    Delta `accounts`, ALCF `sbank`): table rows whose first word is an account name and whose
    last word is a number. Headers and rules have no number at the end and are skipped."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        words = line.replace(",", "").split()
        if len(words) < 2 or not _NUMBER.match(words[-1]):
            continue
        if re.match(r"^[A-Za-z][A-Za-z0-9_.-]*$", words[0]):
            out.setdefault(words[0], float(words[-1]))
    return out


def _arch(nodes: list[NodeRecord], profile: SiteProfile) -> Arch:
    labels = {a.value for a in Arch}
    for n in nodes:
        for feature in n.features:
            if feature in labels:
                return Arch(feature)
    return profile.arch


# A probe section that failed alone, as the part of the view it would have read.
_UNREAD: dict[str, Unread] = {"sshare": "accounts", "queue": "queue", "balance": "balance"}
# The probe's section of partition settings (billing weights): the site adapter asks for it
# every few probes only and fills in the weights it read last when it did not.
PARTITIONS = OCCASIONAL_SECTION


def parse_probe(
    sections: dict[str, BatchSection],
    profile: SiteProfile,
    user: str,
    collected_at: datetime,
) -> SiteState:
    """One SiteState from the batched probe's sections."""
    core = [sections.get("nodes"), sections.get("sinfo")]
    if any(s is None or s.returncode != 0 for s in core):
        failed = [
            n for n in ("nodes", "sinfo") if sections.get(n) is None or sections[n].returncode != 0
        ]
        return SiteState(
            site=profile.name,
            health=Health.OFFLINE,
            collected_at=collected_at,
            error=f"probe sections failed: {', '.join(failed)}",
        )
    nodes = parse_nodes(sections["nodes"].stdout)
    avail = _availability(sections["sinfo"].stdout)
    queue_sec = sections.get("queue")
    queue = _queue_counts(queue_sec.stdout, user) if queue_sec else Counter()
    share = sections.get("sshare")
    accounts, credit = _credit(share.stdout if share else "", user, profile.charge.unit)
    balance = sections.get("balance")
    if balance is not None and balance.returncode == 0:
        balances = parse_balances(balance.stdout)
        credit = tuple(
            c.model_copy(update={"balance": balances.get(c.account)}) for c in credit
        ) + tuple(
            Credit(account=a, balance=b, unit=profile.charge.unit)
            for a, b in balances.items()
            if a not in accounts
        )
        accounts = accounts + tuple(a for a in balances if a not in accounts)
    part_sec = sections.get(PARTITIONS)
    billing_refused = part_sec is not None and part_sec.returncode != 0
    weights = parse_partition_weights(part_sec.stdout) if part_sec and not billing_refused else {}
    partitions = []
    for spec in profile.partitions:
        members = [n for n in nodes if spec.name in n.partitions]
        own = weights.get(spec.scheduler_partition or spec.name, ())
        partitions.append(
            _partition_state(spec.name, members, avail.get(spec.name, False), queue, own)
        )
    problems = [n for n in ("queue", "sshare") if n not in sections or sections[n].returncode]
    if profile.conventions.balance_command and balance is None:
        problems.append("balance")
    unread = tuple(_UNREAD[n] for n in problems)
    if profile.conventions.balance_command and balance is not None and balance.returncode:
        unread += ("balance",)  # the balances keep their last reading; the site is not degraded
    if billing_refused:
        unread += ("billing",)  # the last weights stand; the site is not degraded
    no_nodes = not any(n.usable for n in nodes)
    health = Health.DEGRADED if problems or no_nodes else Health.OK
    error = None
    if problems:
        error = f"probe sections failed: {', '.join(problems)}"
    elif no_nodes:
        error = "no usable nodes"
    return SiteState(
        site=profile.name,
        health=health,
        collected_at=collected_at,
        arch=_arch(nodes, profile),
        partitions=tuple(partitions),
        accounts=accounts,
        credit=credit,
        error=error,
        unread=unread,
    )
