"""A discovered profile and config entry as TOML text, and a field-by-field diff against a shipped
profile. Pure."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from fedhpc.domain.config import UserSiteConfig
from fedhpc.domain.site import PartitionSpec, SiteProfile
from fedhpc.onboard.build import Confirm

__all__ = ["Difference", "config_entry_toml", "profile_diff", "profile_toml"]


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)  # a JSON string is a valid TOML basic string
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{_key(k)} = {_value(x)}" for k, x in v.items()) + " }"
    raise TypeError(f"cannot write {type(v).__name__} as TOML")


def _key(k: str) -> str:
    return k if k.replace("_", "").replace("-", "").isalnum() else json.dumps(k)


def _table(header: str, data: dict[str, Any], out: list[str], notes: dict[str, str]) -> None:
    """`data`'s scalars under `header`, then its sub-tables; `notes` maps dotted keys to a
    trailing comment."""
    scalars = {k: v for k, v in data.items() if not isinstance(v, dict) or k in ("env", "options")}
    if header:
        out.append(f"[{header}]" if not header.startswith("[") else header)
    for k, v in scalars.items():
        if isinstance(v, list) and v and isinstance(v[0], dict):
            continue
        line = f"{_key(k)} = {_value(v)}"
        dotted = f"{header.strip('[]')}.{k}" if header else k
        if dotted in notes:
            line += f"  # CONFIRM: {notes[dotted]}"
        out.append(line)
    for k, v in data.items():
        if isinstance(v, dict) and k not in ("env", "options"):
            base = header.strip("[]") if header else ""
            _table(f"{base}.{k}" if base else k, v, out, notes)


def profile_toml(profile: SiteProfile, confirm: tuple[Confirm, ...]) -> str:
    """The profile as a TOML file `load_profile` reads back; each guessed value carries a
    '# CONFIRM:' comment naming where to look it up."""
    data = profile.model_dump(mode="json", exclude_defaults=True)
    data.setdefault("blocked_partitions", [])
    # Values a person checks are written even where they equal the default.
    data["charge"] = profile.charge.model_dump(mode="json")
    for spec, part in zip(profile.partitions, data["partitions"], strict=True):
        part["max_nodes_per_job"] = spec.max_nodes_per_job
        part["node"]["count"] = spec.node.count
    notes: dict[str, str] = {}
    for c in confirm:
        key = c.field
        if key.startswith("partitions."):
            name, _, rest = key.removeprefix("partitions.").partition(".")
            key = f"partitions[{name}].{rest}"
        notes[key] = f"{c.why}; see {c.look_up}"
    out = [
        f"# Discovered by `fedhpc sites discover` from the {profile.dialect} scheduler of "
        f"{profile.name}.",
        "# Lines marked CONFIRM hold values the scheduler cannot tell; check them before use.",
    ]
    for c in confirm:
        if not c.field.startswith("partitions."):
            notes.setdefault(c.field, f"{c.why}; see {c.look_up}")
    top = {k: v for k, v in data.items() if k not in ("partitions", "storage")}
    for k in ("charge", "containers", "storage"):
        if k in notes:
            out.append(f"# CONFIRM {k}: {notes[k]}")
    _table("", {k: v for k, v in top.items() if not isinstance(v, dict)}, out, notes)
    for k, v in top.items():
        if isinstance(v, dict):
            out.append("")
            _table(k, v, out, notes)
    for s in data.get("storage", []):
        out.append("")
        _table("[[storage]]", s, out, {})
    for p in data["partitions"]:
        out.append("")
        pnotes = {
            f"partitions.{k.split('].', 1)[1]}": v
            for k, v in notes.items()
            if k.startswith(f"partitions[{p['name']}].")
        }
        out.append("[[partitions]]")
        _partition_body(p, out, pnotes)
    return "\n".join(out) + "\n"


def _partition_body(p: dict[str, Any], out: list[str], notes: dict[str, str]) -> None:
    for k, v in p.items():
        if isinstance(v, dict):
            continue
        line = f"{_key(k)} = {_value(v)}"
        if f"partitions.{k}" in notes:
            line += f"  # CONFIRM: {notes[f'partitions.{k}']}"
        out.append(line)
    for k in ("charge", "node"):
        if k in p:
            _table(f"partitions.{k}", p[k], out, notes)


def config_entry_toml(name: str, user: UserSiteConfig, qos_names: tuple[str, ...] = ()) -> str:
    """The `[sites.NAME]` block for config.toml."""
    out = [f"[sites.{_key(name)}]"]
    if user.user:
        out.append(f"user = {_value(user.user)}")
    transport = user.transport.model_dump(exclude_defaults=True)
    if transport:
        out.append(f"transport = {_value(transport)}")
    if qos_names:
        out.append(f"# QoS the scheduler knows: {', '.join(qos_names)}")
    if not user.accounts:
        out.append(
            f"# no association was read: add [[sites.{name}.accounts]] "
            "(the account you submit with)"
        )
    for acct in user.accounts:
        out.append(f"[[sites.{_key(name)}.accounts]]")
        out.append(f"name = {_value(acct.name)}")
        if acct.partitions:
            out.append(f"partitions = {_value(list(acct.partitions))}")
        if acct.qos:
            out.append(f"qos = {_value(acct.qos)}")
        out.append("# budget = 1000.0  # credits fedhpc may spend from this account")
    return "\n".join(out) + "\n"


@dataclass(frozen=True, slots=True)
class Difference:
    """One field where the discovered profile and the shipped one disagree."""

    field: str
    shipped: Any
    discovered: Any

    def line(self) -> str:
        return f"  {self.field}: shipped {self.shipped!r}, discovered {self.discovered!r}"


def _part_fields(p: PartitionSpec) -> dict[str, Any]:
    acc = p.node.accelerator
    return {
        "node.cpus": p.node.cpus,
        "node.memory_mib": p.node.memory_mib,
        "node.count": p.node.count,
        "node.accelerator.type": acc.gres_type if acc else None,
        "node.accelerator.count": acc.count if acc else 0,
        "max_wall_s": p.max_wall_s,
        "default_wall_s": p.default_wall_s,
        "max_nodes_per_job": p.max_nodes_per_job,
        "min_nodes_per_job": p.min_nodes_per_job,
    }


def profile_diff(shipped: SiteProfile, discovered: SiteProfile) -> list[Difference]:
    """Where the scheduler disagrees with the shipped profile: partitions, node shapes, GPU
    types and counts, wall caps, node limits and the architecture. Partitions are matched by
    the scheduler's name (`scheduler_partition`, else `name`)."""
    out: list[Difference] = []
    if shipped.arch != discovered.arch:
        out.append(Difference("arch", shipped.arch.value, discovered.arch.value))
    if shipped.dialect != discovered.dialect:
        out.append(Difference("dialect", shipped.dialect, discovered.dialect))
    ours = {p.scheduler_partition or p.name: p for p in shipped.partitions}
    theirs = {p.name: p for p in discovered.partitions}
    for name in sorted(set(ours) | set(theirs)):
        if name not in theirs:
            out.append(Difference(f"partitions.{name}", "present", "absent"))
            continue
        if name not in ours:
            out.append(Difference(f"partitions.{name}", "absent", "present"))
            continue
        a, b = _part_fields(ours[name]), _part_fields(theirs[name])
        for key in a:
            if a[key] != b[key]:
                out.append(Difference(f"partitions.{name}.{key}", a[key], b[key]))
    return out
