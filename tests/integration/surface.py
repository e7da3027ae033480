"""The whole submit surface as an agent meets it: arguments that the tools' published JSON
schemas accept (hypothesis, from the schemas `tools/list` returns), sent through a real MCP
client to a real daemon. Each call must answer a typed error, or a task that settles on its
own (terminal, live at a scheduler, or queued with a reason other than placing); a normal task
sent afterwards must still be placed. Used by tests/integration/test_input_surface.py and
benchmarks/isolation.py."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import anyio
from hypothesis import strategies as st
from mcp import Client

from fedhpc.client.daemon_client import DaemonClient
from fedhpc.mcp_server.params import ENVELOPE_SCHEMA
from fedhpc.ops.tasks import ResultRequest

__all__ = [
    "ENVELOPE",
    "SUBMITS",
    "Tally",
    "args_for",
    "call",
    "harmless",
    "normal_task_placed",
    "settle",
]

SUBMITS = ("submit_task", "submit_group")
# What an agent plausibly types, beside arbitrary text: the devfed's names, units, slips.
_WORDS = [
    "",
    " ",
    "devdelta",
    "devanvil",
    "devvista",
    "devdeltaai",
    "devdelta/cpu",
    "devdelta/gpuA100x4",
    "gpu",
    "nosite/x",
    "a100",
    "h100",
    "gh200",
    "2h",
    "30",
    "99:99:99",
    "1G",
    "64G",
    "0.5M",
    "../../etc",
    "/etc/passwd",
    "/proc/self/environ",
    "$(touch x)",
    "x" * 300,
    "\x1b]0;title\x07",
]
_TEXT = st.one_of(st.text(max_size=16), st.sampled_from(_WORDS))

# tools/list describes submit_task's envelope in words (issue 36); this is what the words say,
# typed, for generating envelopes (it was the advertised schema until then).
_INT = {"type": "integer"}
_RANGE = {"type": "object", "properties": {"min": _INT, "max": _INT}}
_SIZE = {"anyOf": [{"type": "integer"}, {"type": "string"}]}
_SIZES = {"type": "object", "properties": {"min": _SIZE, "max": _SIZE}}
_STRS = {"type": "array", "items": {"type": "string"}}
ENVELOPE: dict[str, Any] = {
    "type": "object",
    "properties": {
        "gpus": _RANGE,
        "cpus": _RANGE,
        "memory": _SIZES,
        "nodes": _RANGE,
        "wall_time": _SIZES,
        "architectures": {"type": "array", "items": {"enum": ["x86_64", "aarch64"]}},
        "accelerator_types": _STRS,
        "min_accelerator_memory_gib": {"type": "number"},
        "container": {"type": "object", "properties": {"image": {"type": "string"}}},
        "sites_include": _STRS,
        "sites_exclude": _STRS,
        "preferences": {
            "type": "object",
            "properties": {"sites": _STRS, "partitions": _STRS, "spread": {"type": "boolean"}},
        },
        "draft": {"type": "object"},
    },
    "additionalProperties": False,
}


def _value(node: dict[str, Any], defs: dict[str, Any], depth: int) -> Any:
    """A strategy for JSON values `node` accepts (types, enums, required keys and
    additionalProperties: false are honoured; unstated bounds are not invented)."""
    if "$ref" in node:
        return _value(defs[node["$ref"].split("/")[-1]], defs, depth)
    if "anyOf" in node:
        return st.one_of([_value(b, defs, depth) for b in node["anyOf"]])
    if "enum" in node:
        return st.sampled_from(node["enum"])
    kind = node.get("type")
    if isinstance(kind, list):
        return st.one_of([_value({**node, "type": k}, defs, depth) for k in kind])
    if kind == "string":
        lo = int(node.get("minLength", 0))
        return _TEXT.filter(lambda s: len(s) >= lo)
    if kind == "integer":
        return st.one_of(
            st.integers(-2, 4), st.integers(-(2**31), 2**31), st.sampled_from([0, 60, 600])
        )
    if kind == "number":
        return st.one_of(st.floats(-10, 1e6, allow_nan=False), st.integers(-3, 10), st.just(5e-324))
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    if kind == "array":
        lo = int(node.get("minItems", 0))
        item = _value(node.get("items", {}), defs, depth + 1)
        return st.lists(item, min_size=lo, max_size=max(lo, 3))
    if kind == "object" or "properties" in node:
        if depth > 4:
            return st.just({})
        props = node.get("properties", {})
        required = set(node.get("required", ()))
        base = st.fixed_dictionaries(
            {k: _value(v, defs, depth + 1) for k, v in props.items() if k in required},
            optional={k: _value(v, defs, depth + 1) for k, v in props.items() if k not in required},
        )
        extra = node.get("additionalProperties")
        if props or extra is False:
            return base
        values = _value(extra, defs, depth + 1) if isinstance(extra, dict) else _scalar()
        return st.dictionaries(_TEXT, values, max_size=3)
    return _scalar()


def _scalar() -> Any:
    return st.one_of(st.none(), st.booleans(), st.integers(-5, 5), _TEXT)


def args_for(schema: dict[str, Any]) -> Any:
    """Arguments the tool's published input schema accepts (an envelope described in words:
    what the words say)."""
    props = schema.get("properties", {})
    if props.get("envelope") == ENVELOPE_SCHEMA:
        schema = {**schema, "properties": {**props, "envelope": ENVELOPE}}
    return _value(schema, schema.get("$defs", {}), 0)


def harmless(tool: str, args: dict[str, Any]) -> dict[str, Any]:
    """`args` whose commands only echo: the surface is the envelope and the options, not what
    a generated argv[0] would do on this machine."""
    out = dict(args)
    if tool == "submit_task" and isinstance(out.get("command"), list):
        out["command"] = ["echo", *out["command"]]
    if tool == "submit_group" and isinstance(out.get("children"), list):
        out["children"] = [
            {**c, "command": ["echo", *c["command"]]}
            if isinstance(c, dict) and isinstance(c.get("command"), list)
            else c
            for c in out["children"]
        ]
    return out


@dataclass
class Tally:
    """What the calls answered."""

    tried: int = 0
    typed: Counter[str] = field(default_factory=Counter)  # error code -> count
    internal: list[tuple[str, dict[str, Any], str]] = field(default_factory=list)
    accepted: list[str] = field(default_factory=list)  # task ids to settle
    stuck: list[tuple[str, str]] = field(default_factory=list)  # (task id, decision)

    def line(self) -> str:
        return (
            f"inputs {self.tried}, typed errors {sum(self.typed.values())}, internal errors "
            f"{len(self.internal)}, accepted tasks {len(self.accepted)}, stuck {len(self.stuck)}"
        )


async def call(client: Client, tool: str, args: dict[str, Any], tally: Tally) -> None:
    """One tool call; its answer counted (a typed error, or the tasks it accepted)."""
    tally.tried += 1
    result = await client.call_tool(tool, args)
    if result.is_error:
        text = result.content[0].text if result.content else ""  # type: ignore[union-attr]
        try:
            body = json.loads(text)
        except ValueError:
            tally.internal.append((tool, args, text[:300]))
            return
        code = body.get("code") if isinstance(body, dict) else None
        if not isinstance(code, str) or code == "internal":
            tally.internal.append((tool, args, text[:300]))
        else:
            tally.typed[code] += 1
        return
    answer = result.structured_content or {}
    if tool == "submit_task":
        tally.accepted.append(str(answer["task_id"]))
    else:
        tally.accepted += [str(c["task_id"]) for c in answer.get("children", [])]


def _settled(state: str, decision: str) -> bool:
    """Terminal, live at a scheduler, or queued with a reason (held, waiting for a site)."""
    return state != "queued" or not decision.startswith("queued: placing")


async def settle(daemon: DaemonClient, tally: Tally, *, cycles: int = 3) -> None:
    """After `cycles` more control cycles, the accepted tasks still 'queued: placing' are
    stuck: no pass placed them, held them or refused them."""
    until = int((await daemon.health())["cycles"]) + cycles + 1
    with anyio.fail_after(60 + 5 * cycles):
        while int((await daemon.health())["cycles"]) < until:
            await anyio.sleep(0.2)
    for tid in tally.accepted:
        r = await daemon.get_result(ResultRequest(task_id=tid))
        if not _settled(r.state.value, r.waiting or ""):
            tally.stuck.append((tid, r.waiting or ""))


async def normal_task_placed(client: Client, daemon: DaemonClient, tag: str) -> bool:
    """A one-CPU task sent now leaves the queue (placed and handed to a scheduler)."""
    args = {
        "command": ["echo", tag],
        "envelope": {"cpus": {"min": 1}, "wall_time": {"min": "10m"}},
    }
    result = await client.call_tool("submit_task", args)
    assert not result.is_error, result.content
    tid = str((result.structured_content or {})["task_id"])
    with anyio.move_on_after(30):
        while True:
            r = await daemon.get_result(ResultRequest(task_id=tid))
            if r.state.value != "queued":
                return True
            await anyio.sleep(0.2)
    return False
