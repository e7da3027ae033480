"""Compact JSON schemas: tool definitions are context the model pays for on every turn.

The rewrites keep what a client validates (types, enums, bounds, required) and drop what only
decorates: titles, class docstrings, and defaults that say "empty". Output schemas also lose
descriptions. Nullable scalars become `{"type": [t, "null"]}`; in inputs an optional parameter
whose default is null simply omits the null branch (leaving it out means the same)."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["compact_input", "compact_output"]

_NAME_MAPS = frozenset({"properties", "$defs", "definitions", "patternProperties"})
_EMPTY: tuple[Any, ...] = (None, [], {}, "", False)
_NULL = {"type": "null"}
# What an output schema keeps: the shape and the types. Bounds, formats, enums and `required`
# only restate what the daemon already guarantees, and cost context on every turn.
_OUTPUT_KEYS = frozenset({"type", "properties", "items", "anyOf", "$ref", "$defs"})


def _nullable(node: dict[str, Any], drop_null: bool) -> dict[str, Any]:
    """`anyOf: [X, null]` as X (inputs, optional) or as X with "null" added to its type."""
    branches = node.get("anyOf")
    if not isinstance(branches, list) or len(branches) != 2 or _NULL not in branches:
        return node
    other = next(b for b in branches if b != _NULL)
    rest = {k: v for k, v in node.items() if k != "anyOf"}
    if drop_null:
        return {**other, **rest}
    kind = other.get("type")
    if isinstance(kind, str) and set(other) <= {"type", "format", "minimum", "maximum"}:
        return {**other, "type": [kind, "null"], **rest}
    return node


def _walk(node: Any, *, output: bool, optional: bool = False) -> Any:
    if isinstance(node, list):
        return [_walk(item, output=output) for item in node]
    if not isinstance(node, dict):
        return node
    if optional and not output and node.get("default", 0) is None:
        node = _nullable(node, drop_null=True)
    else:
        node = _nullable(node, drop_null=False)
    required = set(node.get("required", ()))
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "title" or (output and key not in _OUTPUT_KEYS):
            continue
        if key == "default" and any(value == e and type(value) is type(e) for e in _EMPTY):
            continue
        if key == "additionalProperties" and value is True:  # what JSON Schema assumes anyway
            continue
        if key == "properties" and isinstance(value, dict):
            out[key] = {
                name: _walk(sub, output=output, optional=name not in required)
                for name, sub in value.items()
            }
        elif key in _NAME_MAPS and isinstance(value, dict):
            # Keys here are names (a property may well be called "title").
            out[key] = {name: _walk(sub, output=output) for name, sub in value.items()}
        else:
            out[key] = _walk(value, output=output)
    return out


def _inline_enums(schema: dict[str, Any], once: bool = False) -> dict[str, Any]:
    """Put an enum used once where it is used (shorter, and clients that drop `$defs` still
    see the values), and a bare `{"type": ...}` everywhere (shorter than its `$ref`); with
    `once`, any definition used once (inputs: a group's child; a recursive one is used by
    itself too); then drop definitions nothing refers to."""
    defs: dict[str, Any] = schema.get("$defs", {})
    text = repr(schema)

    def inlined(name: str, definition: dict[str, Any]) -> bool:
        used_once = text.count(f"'#/$defs/{name}'") == 1
        return (used_once and (once or "enum" in definition)) or set(definition) == {"type"}

    enums = {f"#/$defs/{n}": d for n, d in defs.items() if inlined(n, d)}

    def sub(node: Any) -> Any:
        if isinstance(node, list):
            return [sub(item) for item in node]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        if ref in enums:  # its own refs (to definitions kept or inlined) are resolved too
            return sub({**enums[ref], **{k: v for k, v in node.items() if k != "$ref"}})
        return {k: sub(v) for k, v in node.items()}

    out: dict[str, Any] = sub({k: v for k, v in schema.items() if k != "$defs"})
    rest = {n: sub(d) for n, d in defs.items() if f"#/$defs/{n}" not in enums}
    reachable: set[str] = set()
    frontier: list[Any] = [out]
    while frontier:
        seen = repr(frontier.pop())
        for name, definition in rest.items():
            if name not in reachable and f"'#/$defs/{name}'" in seen:
                reachable.add(name)
                frontier.append(definition)
    if reachable:
        out["$defs"] = {n: d for n, d in rest.items() if n in reachable}
    return out


def _opaque(schema: dict[str, Any], names: frozenset[str]) -> dict[str, Any]:
    """Refer to the named definitions as plain objects (before `_walk` folds nullables)."""
    refs = {f"#/$defs/{n}" for n in names}

    def sub(node: Any) -> Any:
        if isinstance(node, list):
            return [sub(item) for item in node]
        if not isinstance(node, dict):
            return node
        if node.get("$ref") in refs:
            return {"type": "object", **{k: v for k, v in node.items() if k != "$ref"}}
        return {k: sub(v) for k, v in node.items()}

    out: dict[str, Any] = sub(schema)
    return out


_NOTES = ("description", "default")  # stay beside a `$ref`: they belong to the place of use


def _size(node: Any) -> int:
    return len(json.dumps(node, separators=(",", ":"), ensure_ascii=False).encode())


def _core(node: dict[str, Any]) -> str:
    return json.dumps({k: v for k, v in node.items() if k not in _NOTES}, sort_keys=True)


def _cores(node: Any, found: dict[str, int], top: bool = True) -> None:
    """Count every sub-schema (without its notes) below the root."""
    if isinstance(node, list):
        for item in node:
            _cores(item, found, top=False)
        return
    if not isinstance(node, dict):
        return
    if not top and "$ref" not in node:
        core = _core(node)
        found[core] = found.get(core, 0) + 1
    for key, value in node.items():
        if key in _NAME_MAPS and isinstance(value, dict):
            for sub in value.values():
                _cores(sub, found, top=False)
        elif key not in ("enum", "const", "default", "examples"):
            _cores(value, found, top=False)


def _refer(node: Any, core: str, ref: str, top: bool = True) -> Any:
    if isinstance(node, list):
        return [_refer(item, core, ref, top=False) for item in node]
    if not isinstance(node, dict):
        return node
    if not top and "$ref" not in node and _core(node) == core:
        return {"$ref": ref, **{k: v for k, v in node.items() if k in _NOTES}}
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _NAME_MAPS and isinstance(value, dict):
            out[key] = {n: _refer(sub, core, ref, top=False) for n, sub in value.items()}
        elif key in ("enum", "const", "default", "examples"):
            out[key] = value
        else:
            out[key] = _refer(value, core, ref, top=False)
    return out


def _share(schema: dict[str, Any]) -> dict[str, Any]:
    """Write a sub-schema used twice or more once, in the root's `$defs`, where that is
    shorter (the envelope's ranges, string lists): same structure, same constraints, fewer
    bytes of context. Greedy: the biggest saving first, until none is left."""
    best = schema
    while True:
        found: dict[str, int] = {}
        _cores(best, found)
        defs: dict[str, Any] = best.get("$defs", {})
        name = f"s{len(defs)}"
        while name in defs:
            name += "_"
        choice = best
        for core, count in found.items():
            if count < 2:
                continue
            shared = _refer(best, core, f"#/$defs/{name}")
            shared["$defs"] = {**shared.get("$defs", {}), name: json.loads(core)}
            if _size(shared) < _size(choice):
                choice = shared
        if choice is best:
            return best
        best = choice


def compact_input(schema: dict[str, Any]) -> dict[str, Any]:
    """Drop titles, class docstrings and empty defaults; keep parameter descriptions; put a
    definition used once where it is used; write a repeated sub-schema once."""
    out: dict[str, Any] = _walk(schema, output=False)
    for definition in out.get("$defs", {}).values():
        if isinstance(definition, dict):
            definition.pop("description", None)
    return _share(_inline_enums(out, once=True))


def compact_output(schema: dict[str, Any], opaque: frozenset[str] = frozenset()) -> dict[str, Any]:
    """Keep the shape and the types (what clients check); `opaque` definitions are advertised
    as plain objects and dropped once nothing refers to them."""
    return _inline_enums(_walk(_opaque(schema, opaque), output=True))
