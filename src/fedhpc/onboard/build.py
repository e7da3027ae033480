"""From what a scheduler told (ClusterFacts) to a site profile, the user's config entry, and the
list of things only a person can confirm. Pure: no I/O, no clock."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

from fedhpc.adapters.dialects.facts import ClusterFacts, PartitionFacts
from fedhpc.domain.accelerators import GPU_MEMORY_GIB
from fedhpc.domain.billing import billing_per_hour
from fedhpc.domain.config import AccountConfig, UserSiteConfig
from fedhpc.domain.site import SAFE_NAME, SiteProfile, TransportSpec

__all__ = ["GPU_MEMORY_GIB", "Confirm", "Discovery", "build_discovery", "gpu_model"]

_TWO_SIZES = {"a100", "v100", "h100"}
_MEM_IN_NAME = re.compile(r"(\d{1,3})\s*gb(?![a-z])")
_BLOCK_HINTS = ("interactive", "debug", "preempt")


@dataclass(frozen=True, slots=True)
class Confirm:
    """A value the scheduler cannot tell: what fedhpc put there, and where the person looks."""

    field: str
    value: str
    why: str
    look_up: str

    def as_dict(self) -> dict[str, str]:
        return {"field": self.field, "value": self.value, "why": self.why, "look_up": self.look_up}


@dataclass(frozen=True, slots=True)
class Discovery:
    """The outcome of one discovery."""

    profile: SiteProfile
    user: UserSiteConfig
    confirm: tuple[Confirm, ...]
    notes: tuple[str, ...]
    qos_names: tuple[str, ...]


def gpu_model(gres_type: str) -> tuple[str, float | None, bool]:
    """(model, memory GiB or None, sure) for a GRES type such as 'a100', 'A100_80GB' or
    'nvidia_h100_80gb_hbm3'."""
    low = gres_type.lower()
    size = _MEM_IN_NAME.search(low)
    for model in sorted(GPU_MEMORY_GIB, key=len, reverse=True):
        if re.search(rf"(^|[^a-z0-9]){model}($|[^a-z0-9])", low.replace("-", "_")) or low == model:
            if size:
                return model, float(size.group(1)), True
            return model, GPU_MEMORY_GIB[model], model not in _TWO_SIZES
    if size:
        return _safe(low), float(size.group(1)), False
    return _safe(low), None, False


def _safe(name: str) -> str:
    cleaned = re.sub(r"[^a-z0-9_.+-]", "_", name)
    return cleaned if SAFE_NAME.match(cleaned) else "gpu"


def _seconds_text(seconds: int) -> str:
    if seconds % 3600 == 0:
        return f"{seconds // 3600}h"
    if seconds % 60 == 0:
        return f"{seconds // 60}m"
    return f"{seconds}s"


def _partition(
    p: PartitionFacts, site_arch: str, confirm: list[Confirm], notes: list[str]
) -> dict[str, Any]:
    key = f"partitions.{p.name}"
    node: dict[str, Any] = {"cpus": p.cpus, "memory_mib": p.memory_mib, "count": p.nodes}
    if p.gpus and p.gpu_type:
        model, memory, sure = gpu_model(p.gpu_type)
        acc: dict[str, Any] = {"type": model, "memory_gib": memory or 1.0, "count": p.gpus}
        if model != p.gpu_type:
            acc["gres"] = p.gpu_type
        node["accelerator"] = acc
        if not sure:
            shown = f"{memory:g}" if memory else "unknown (1 until set)"
            confirm.append(
                Confirm(
                    f"{key}.node.accelerator.memory_gib",
                    shown,
                    f"the scheduler names the GPU ({p.gpu_type}) but not its memory",
                    "the center's hardware / system architecture page",
                )
            )
    elif p.gpus:
        node["accelerator"] = {"type": "gpu", "memory_gib": 1.0, "count": p.gpus}
        confirm.append(
            Confirm(
                f"{key}.node.accelerator",
                f"{p.gpus} untyped GPU(s)",
                "the GRES has no type, so the model and its memory are unknown",
                "the center's hardware / system architecture page",
            )
        )
    spec: dict[str, Any] = {"name": p.name, "node": node}
    if p.max_wall_s:
        spec["max_wall_s"] = p.max_wall_s
    else:
        spec["max_wall_s"] = 86400
        confirm.append(
            Confirm(
                f"{key}.max_wall_s",
                "24h",
                "the partition sets no time limit (UNLIMITED)",
                "the center's 'running jobs' page (partition / queue table)",
            )
        )
    if p.default_wall_s:
        spec["default_wall_s"] = p.default_wall_s
    max_nodes = min(p.max_nodes or p.nodes, p.nodes)
    spec["max_nodes_per_job"] = max(max_nodes, p.min_nodes)
    if p.min_nodes > 1:
        spec["min_nodes_per_job"] = p.min_nodes
    if p.max_jobs_per_user:
        spec["max_jobs_per_user"] = p.max_jobs_per_user
    if p.allowed_qos:
        spec["qos"] = list(p.allowed_qos)
    if p.qos and SAFE_NAME.match(p.qos):
        spec["default_qos"] = p.qos
    if p.arch and p.arch != site_arch and p.arch in ("x86_64", "aarch64"):
        spec["arch"] = p.arch
    extra = []
    if p.max_submit_per_user:
        extra.append(f"MaxSubmitPU={p.max_submit_per_user}")
    if p.other_shapes:
        extra.append("also " + "; ".join(p.other_shapes))
        notes.append(f"partition {p.name} mixes node shapes: the most common is used ({extra[-1]})")
    if not p.available:
        extra.append("state not UP at discovery")
    if extra:
        spec["notes"] = ". ".join(extra)
    return spec


def _blocked(parts: tuple[PartitionFacts, ...]) -> list[str]:
    return [
        p.name for p in parts if p.preemptible or any(h in p.name.lower() for h in _BLOCK_HINTS)
    ]


def _user_entry(facts: ClusterFacts, names: set[str], login: str | None) -> UserSiteConfig:
    accounts: dict[str, dict[str, Any]] = {}
    for a in facts.associations:
        if not SAFE_NAME.match(a.account):
            continue
        entry = accounts.setdefault(
            a.account, {"name": a.account, "partitions": set(), "all": False}
        )
        if a.partition is None:
            entry["all"] = True
        elif a.partition in names:
            entry["partitions"].add(a.partition)
        if a.default_qos and SAFE_NAME.match(a.default_qos):
            entry["qos"] = a.default_qos
    configs = []
    for entry in accounts.values():
        parts = () if entry["all"] else tuple(sorted(entry["partitions"]))
        if not entry["all"] and not parts:
            continue
        configs.append(AccountConfig(name=entry["name"], partitions=parts, qos=entry.get("qos")))
    return UserSiteConfig(user=login, accounts=tuple(configs))


def _billed_charge(p: PartitionFacts) -> dict[str, Any] | None:
    """The partition's charge from its Slurm billing weights: a whole node's billing units per
    hour shared over its GPUs (gpu-hours) or, without GPUs, its cores (core-hours)."""
    if not p.billing_weights:
        return None
    per_node = billing_per_hour(
        p.billing_weights,
        cpus=p.cpus,
        memory_mib=p.memory_mib,
        gpus=p.gpus,
        nodes=1,
        gpu_type=p.gpu_type,
    )
    units = p.gpus or p.cpus
    if per_node <= 0 or units <= 0:
        return None
    return {
        "kind": "gpu-hours" if p.gpus else "core-hours",
        "rate": round(per_node / units, 4),
        "follow_scheduler": True,  # the daemon's later readings of the weights replace it
    }


def _charges(
    facts: ClusterFacts, partitions: list[dict[str, Any]], confirm: list[Confirm]
) -> dict[str, Any]:
    """The site's charge, each partition's own where it differs (set in `partitions`), and
    the line for the person to confirm them."""
    gpu = any("accelerator" in p["node"] for p in partitions)
    kind = (
        "gpu-hours" if gpu and all("accelerator" in p["node"] for p in partitions) else "core-hours"
    )
    # Under Slurm a guessed charge follows the billing weights the daemon reads at its probes
    # (`domain.billing.live_charge`) until the person states the center's figure.
    follow = {"follow_scheduler": True} if facts.dialect == "slurm" else {}
    for spec in partitions:
        if gpu and kind == "core-hours" and "accelerator" in spec["node"]:
            spec["charge"] = {"kind": "gpu-hours", "rate": 1.0, **follow}
    mixed = " (GPU partitions: gpu-hours)" if gpu and kind == "core-hours" else ""
    billed = []
    for facts_p, spec in zip(facts.partitions, partitions, strict=True):
        charge = _billed_charge(facts_p)
        if charge is not None:
            spec["charge"] = charge
            billed.append(facts_p.name)
    why = f"the {facts.dialect} scheduler does not say what the center charges"
    if follow:
        why = (
            "no partition sets Slurm TRESBillingWeights, so the scheduler does not say what the "
            "center charges; where one sets them later, the daemon's probe reads them"
        )
    if billed:
        why = (
            f"{', '.join(billed)}: from Slurm TRESBillingWeights (a node's billing per GPU or "
            "core), which the daemon's probe reads again; the center's allocation unit may differ"
        )
    if follow:
        why += "; with the center's figure in, set follow_scheduler = false to keep it"
    confirm.append(
        Confirm(
            "charge",
            f"{kind}, rate 1.0 per unit-hour{mixed}",
            why,
            "the center's 'job accounting' / 'charging' page (charge factors per partition)",
        )
    )
    return {"kind": kind, "rate": 1.0, "unit": "SU", **follow}


def build_discovery(
    facts: ClusterFacts,
    *,
    name: str,
    transport: TransportSpec,
    title: str = "",
    login: str | None = None,
) -> Discovery:
    """A SiteProfile and config entry for `name` from `facts`; every guess is in `confirm`."""
    confirm: list[Confirm] = []
    notes = [f"discovery could not read: {p}" for p in facts.problems]
    arch = facts.login.arch if facts.login.arch in ("x86_64", "aarch64") else None
    weights: Counter[str] = Counter()
    for p in facts.partitions:  # by nodes; a tie goes to the first partition listed
        if p.arch in ("x86_64", "aarch64"):
            weights[p.arch] += p.nodes
    if weights:
        arch = weights.most_common(1)[0][0]
    if arch is None:
        arch = "x86_64"
        confirm.append(
            Confirm(
                "arch",
                arch,
                "neither nodes nor the login side named it",
                "the center's system architecture page",
            )
        )
    partitions = [_partition(p, arch, confirm, notes) for p in facts.partitions]
    if not partitions:
        raise ValueError("the scheduler lists no partition with nodes")
    charge = _charges(facts, partitions, confirm)
    blocked = _blocked(facts.partitions)
    confirm.append(
        Confirm(
            "blocked_partitions",
            ", ".join(blocked) or "(none)",
            "which partitions are interactive, debug or preemptible is policy, "
            "not a scheduler fact",
            "the center's 'running jobs' page: interactive, debug and preempt partitions",
        )
    )
    runtimes = list(facts.login.runtimes)
    containers: dict[str, Any] = {"runtimes": runtimes}
    if runtimes and runtimes[0] not in ("apptainer", "singularity"):
        containers["exec_template"] = f"{runtimes[0]} run {{gpu_flag}} {{image}}"
    confirm.append(
        Confirm(
            "containers.runtimes",
            ", ".join(runtimes) or "(none)",
            "found on the login node's PATH only; compute nodes may differ",
            "the center's 'containers' page",
        )
    )
    storage = [{"name": k, "path": v} for k, v in sorted(facts.login.storage.items())]
    confirm.append(
        Confirm(
            "storage",
            ", ".join(f"{s['name']}={s['path']}" for s in storage) or "(none)",
            "from the login environment's variables; purge policies and Globus collections are not",
            "the center's 'data management' / 'file systems' page",
        )
    )
    data: dict[str, Any] = {
        "name": name,
        "title": title or f"{name} (discovered)",
        "center": facts.cluster or name,
        "dialect": facts.dialect,
        "arch": arch,
        "blocked_partitions": blocked,
        "charge": charge,
        "conventions": {
            "account_required": bool(facts.associations) or facts.dialect != "slurm",
            "qos_required": False,
            "gpu_request_style": "gres" if facts.dialect == "slurm" else "gpus-per-node",
        },
        "containers": containers,
        "transport": transport.model_dump(exclude_defaults=True),
        "storage": storage,
        "partitions": partitions,
        "notes": "Discovered by `fedhpc sites discover`; confirm the fields it lists.",
    }
    profile = SiteProfile.model_validate(data)
    names = {p.name for p in profile.partitions}
    user = _user_entry(facts, names, login or facts.login.user)
    if facts.dialect != "slurm":
        confirm.append(
            Confirm(
                "sites.accounts",
                "(none)",
                f"{facts.dialect} keeps no account associations fedhpc can read",
                "the center's allocations page (the project names you submit with, e.g. `sbank`)",
            )
        )
    unread = next((p for p in facts.problems if p.split(" ", 1)[0] == "assoc"), None)
    if facts.dialect == "slurm" and unread is not None:
        confirm.append(
            Confirm(
                "sites.accounts",
                "(none read)",
                f"your associations could not be read: {unread.removeprefix('assoc ')}",
                "the center's allocations page, or `sacctmgr show assoc user=$USER` / "
                "`sshare -U` on the login node (the account names you submit with)",
            )
        )
    elif not facts.associations and facts.dialect == "slurm":
        notes.append("sacctmgr lists no association for this user: ask the center for an account")
    return Discovery(profile, user, tuple(confirm), tuple(notes), facts.qos_names)
