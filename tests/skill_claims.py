"""What the shipped skills claim, read mechanically, and what the code offers to check it with:
tool and parameter names, enum values, event kinds, error codes, resources, the wake set, and
the fields of the resume message."""

from __future__ import annotations

import importlib
import json
import pkgutil
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import fedhpc
from fedhpc.cli.serve import skills_source
from fedhpc.errors import FedError
from fedhpc.ops.events import INTERNAL_CONSUMERS as INTERNAL

__all__ = [
    "Skill",
    "Vocabulary",
    "check",
    "error_codes",
    "event_kinds",
    "payload_keys",
    "resume_claims",
    "skills",
    "state_values",
]

SRC = Path(fedhpc.__file__).parent
_EVENT = re.compile(r"^(task|group|transfer|site)\.[a-z_]+$")
_EVENT_LITERAL = re.compile(r"""["']((?:task|group|transfer|site)\.[a-z_]+)["']""")
# Words a skill may put in backticks that are not tools, fields, enum values, codes or events:
# storage-root names of the shipped profiles, skill names, placeholders.
ALLOWED = {
    "scratch",
    "work",
    "fedhpc-continue",
    "fedhpc-submit",
    "fedhpc-envelopes",
    "fedhpc-inspect",
    "root",
    "fedhpc",
}


@dataclass
class Skill:
    name: str
    description: str
    body: str

    @property
    def spans(self) -> list[str]:
        """Inline code spans outside fenced blocks."""
        text = re.sub(r"```.*?```", "", self.body, flags=re.S)
        return re.findall(r"`([^`\n]+)`", text)

    @property
    def json_blocks(self) -> list[Any]:
        return [json.loads(b) for b in re.findall(r"```json\n(.*?)```", self.body, flags=re.S)]

    def line(self, prefix: str) -> str:
        """The text of the (single) line or list item that starts with `prefix`."""
        found = [ln for ln in self.body.splitlines() if ln.lstrip("- ").startswith(prefix)]
        assert len(found) == 1, f"{self.name}: expected one line starting {prefix!r}"
        return found[0]

    def events_on(self, prefix: str) -> set[str]:
        return {s for s in re.findall(r"`([^`]+)`", self.line(prefix)) if _EVENT.match(s)}


def skills() -> list[Skill]:
    out = []
    for path in sorted(skills_source().glob("*/SKILL.md")):
        _, front, body = path.read_text().split("---\n", 2)
        meta = dict(ln.split(": ", 1) for ln in front.strip().splitlines())
        out.append(Skill(meta["name"], meta["description"], body))
    return out


def resume_claims() -> tuple[set[str], set[str]]:
    """The resume message's fields as fedhpc-continue states them: (always, when known)."""
    body = next(s for s in skills() if s.name == "fedhpc-continue").body
    text = " ".join(body.split())
    always = re.search(r"always has (.*?); when known also (.*?)\.", text)
    assert always, "fedhpc-continue names the resume message's fields"
    fields = [set(re.findall(r"`([a-z_]+)`", g)) for g in always.groups()]
    return fields[0], fields[1]


def event_kinds() -> set[str]:
    """Every event kind the code names as a string literal (emitters, wake sets, hints)."""
    kinds: set[str] = set()
    for path in SRC.rglob("*.py"):
        kinds |= set(_EVENT_LITERAL.findall(path.read_text()))
    return kinds


def error_codes() -> set[str]:
    for mod in pkgutil.walk_packages([str(SRC)], "fedhpc."):
        if mod.name.startswith(
            (
                "fedhpc.daemon.__main__",
                "fedhpc.mcp_server.__main__",
            )
        ):
            continue
        importlib.import_module(mod.name)
    codes: set[str] = set()
    todo: list[type[FedError]] = [FedError]
    while todo:
        cls = todo.pop()
        codes.add(cls.code)
        todo.extend(cls.__subclasses__())
    return codes


def state_values() -> set[str]:
    """The values of fedhpc's own enums (health, job and transfer states, policies, ...)."""
    from enum import StrEnum

    error_codes()  # imports every module
    out: set[str] = set()
    todo: list[type[StrEnum]] = list(StrEnum.__subclasses__())
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        if cls.__module__.startswith("fedhpc."):
            out |= {str(m.value) for m in cls}
    return out


def payload_keys(kinds: set[str]) -> tuple[set[str], set[str]]:
    """(keys every resume payload has, keys some have), from the bridge's own builder."""
    from fedhpc.bridge import build_payload

    every: set[str] | None = None
    some: set[str] = set()
    full = {
        "task_id": "t1",
        "group_id": "g1",
        "transfer_id": "x1",
        "site": "s",
        "reason": "r",
        "hint": "h",
        "state": "failed",
        "result": "fedhpc://transfers/x1",
    }
    for kind in sorted(kinds):
        for payload in ({"state": "failed", "result": "fedhpc://tasks/t1"}, full):
            event = {
                "kind": kind,
                "id": "e1",
                "subject": "t1",
                "seq": 1,
                "created_at": "2026-11-30T00:00:00+00:00",
                "payload": payload,
            }
            attempt = {"n": 1, "site": "s", "state": "failed"}
            keys = set(build_payload(event, [attempt], delivery_id="d1"))
            every = keys if every is None else every & keys
            some |= keys
    return every or set(), some


def _walk(schema: Any, props: set[str], enums: set[str]) -> None:
    if isinstance(schema, dict):
        props |= set(schema.get("properties", {}))
        for key in ("enum", "const"):
            vals = schema.get(key)
            for v in vals if isinstance(vals, list) else [vals] if vals is not None else []:
                if isinstance(v, str):
                    enums.add(v)
        for v in schema.values():
            _walk(v, props, enums)
    elif isinstance(schema, list):
        for v in schema:
            _walk(v, props, enums)


@dataclass
class Vocabulary:
    """What the live server offers (from tools/list and the resource lists)."""

    inputs: dict[str, dict[str, Any]]  # tool -> input schema
    outputs: dict[str, dict[str, Any]]  # tool -> output schema
    resources: set[str]  # fixed URIs and templates
    extra: set[str] = field(default_factory=set)  # state values, resume payload keys
    props: set[str] = field(default_factory=set)
    enums: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        for schema in [*self.inputs.values(), *self.outputs.values()]:
            _walk(schema, self.props, self.enums)

    def params(self, tool: str) -> dict[str, Any]:
        props: dict[str, Any] = self.inputs[tool].get("properties", {})
        return props

    def enum_of(self, tool: str, param: str) -> set[str]:
        props: set[str] = set()
        enums: set[str] = set()
        _walk(self._resolve(tool, self.params(tool)[param]), props, enums)
        return enums

    def _resolve(self, tool: str, schema: Any) -> Any:
        defs = self.inputs[tool].get("$defs", {})
        if isinstance(schema, dict) and "$ref" in schema:
            return defs.get(schema["$ref"].rsplit("/", 1)[-1], schema)
        if isinstance(schema, dict):
            return {k: self._resolve(tool, v) for k, v in schema.items()}
        if isinstance(schema, list):
            return [self._resolve(tool, v) for v in schema]
        return schema

    def resource_ok(self, uri: str) -> bool:
        for r in self.resources:
            pattern = re.escape(r)
            pattern = re.sub(r"\\\{[a-z_]+\\\}", r"(\\{[a-z_]+\\}|[^/]+)", pattern)
            if re.fullmatch(pattern, uri):
                return True
        return False


def check(skill: Skill, vocab: Vocabulary, kinds: set[str], codes: set[str]) -> list[str]:
    """Every mechanically checkable claim of `skill` that the code does not back."""
    wrong: list[str] = []
    tools = set(vocab.inputs)
    for span in skill.spans:
        call = re.fullmatch(r"(\w+)\((.*)\)", span)
        assign = re.fullmatch(r"(\w+)=(.+)", span)
        if call:
            tool, args = call.groups()
            if tool not in tools:
                wrong.append(f"`{span}`: no tool {tool}")
                continue
            for key, value in re.findall(r"(\w+)=(\"[^\"]*\"|'[^']*'|[^,)]+)", args):
                wrong += _param(vocab, tool, key, value, span)
        elif assign:
            key, value = assign.groups()
            owners = [t for t in tools if key in vocab.params(t)]
            if not owners:
                wrong.append(f"`{span}`: no tool takes {key}")
            elif value.startswith('"') and all(_param(vocab, t, key, value, span) for t in owners):
                wrong += _param(vocab, owners[0], key, value, span)
        elif span.startswith("fedhpc://"):
            if not vocab.resource_ok(span):
                wrong.append(f"`{span}`: no such resource")
        elif _EVENT.match(span):
            if span not in kinds:
                wrong.append(f"`{span}`: no such event kind")
        elif re.fullmatch(r"[a-z][a-z0-9_-]*", span):
            known = tools | vocab.props | vocab.enums | vocab.extra | codes | ALLOWED | INTERNAL
            if span not in known:
                wrong.append(f"`{span}`: not a tool, field, value, error code or event")
    for block in skill.json_blocks:
        wrong += [f"json key {k!r}: not a field" for k in _keys(block) if k not in vocab.props]
    return wrong


def _param(vocab: Vocabulary, tool: str, key: str, value: str, span: str) -> list[str]:
    if key not in vocab.params(tool):
        return [f"`{span}`: {tool} has no parameter {key}"]
    enum = vocab.enum_of(tool, key)
    if value[:1] in "\"'" and enum and value.strip("\"'") not in enum:
        return [f"`{span}`: {value} is not one of {sorted(enum)}"]
    return []


def _keys(block: Any) -> set[str]:
    if isinstance(block, dict):
        return set(block) | {k for v in block.values() for k in _keys(v)}
    if isinstance(block, list):
        return {k for v in block for k in _keys(v)}
    return set()
