"""Compact schemas keep what clients validate; the hand-written envelope schema stays in step."""

from __future__ import annotations

import re
from typing import Annotated, Any

from jsonschema import Draft202012Validator
from pydantic import BaseModel, Field, WithJsonSchema

from fedhpc.domain.envelope import ResourceEnvelope
from fedhpc.mcp_server.params import ADAPTATION_SCHEMA, ENVELOPE_SCHEMA
from fedhpc.mcp_server.schema import compact_input, compact_output
from fedhpc.ops.tasks import AdaptationPolicy


class Inner(BaseModel):
    """A docstring the model need not read."""

    title: str = Field(description="a property that happens to be called title")
    n: int = Field(default=0, ge=0)


class Outer(BaseModel):
    inner: Inner
    maybe: str | None = None


def test_input_compaction_drops_titles_and_docstrings_but_not_a_property_named_title() -> None:
    schema = compact_input(Outer.model_json_schema())
    inner = schema["properties"]["inner"]  # used once: written where it is used
    assert "title" in inner["properties"]
    assert inner["properties"]["title"]["description"].startswith("a property")
    assert "description" not in inner
    assert "title" not in inner["properties"]["n"]
    assert inner["properties"]["n"]["minimum"] == 0
    assert schema["properties"]["maybe"] == {"type": "string"}  # optional: null = leave it out
    assert inner["required"] == ["title"]


class Pair(BaseModel):
    left: Inner
    right: Inner


class Tree(BaseModel):
    children: list[Tree] = []


class Forest(BaseModel):
    tree: Tree


def test_an_input_definition_used_once_is_inlined_but_not_a_shared_or_recursive_one() -> None:
    pair = compact_input(Pair.model_json_schema())
    assert pair["properties"]["left"] == {"$ref": "#/$defs/Inner"}
    assert set(pair["$defs"]) == {"Inner"}
    forest = compact_input(Forest.model_json_schema())
    assert forest["properties"]["tree"] == {"$ref": "#/$defs/Tree"}
    assert forest["$defs"]["Tree"]["properties"]["children"]["items"] == {"$ref": "#/$defs/Tree"}
    nested = compact_input(Outer.model_json_schema())
    assert "$defs" not in nested


def test_output_compaction_keeps_types_and_nullability() -> None:
    schema = compact_output(Outer.model_json_schema())
    assert schema == {
        "type": "object",
        "properties": {"inner": {"$ref": "#/$defs/Inner"}, "maybe": {"type": ["string", "null"]}},
        "$defs": {
            "Inner": {
                "type": "object",
                "properties": {"title": {"type": "string"}, "n": {"type": "integer"}},
            }
        },
    }


def test_opaque_definitions_become_plain_objects_and_leave_no_orphans() -> None:
    schema = compact_output(Outer.model_json_schema(), frozenset({"Inner"}))
    assert schema["properties"]["inner"] == {"type": "object"}
    assert "$defs" not in schema


def _words(text: str) -> set[str]:
    return set(re.findall(r"[a-z_]+", text))


def test_the_advertised_envelope_and_adaptation_name_every_contract_field() -> None:
    assert set(ResourceEnvelope.model_fields) <= _words(ENVELOPE_SCHEMA["description"])
    assert set(AdaptationPolicy.model_fields) <= _words(ADAPTATION_SCHEMA["description"])


def _resolved(node: object, defs: dict[str, object]) -> object:
    if isinstance(node, list):
        return [_resolved(item, defs) for item in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/") and ref[8:] in defs:
        rest = {k: v for k, v in node.items() if k != "$ref"}
        return _resolved({**defs[ref[8:]], **rest}, defs)  # type: ignore[dict-item]
    return {k: _resolved(v, defs) for k, v in node.items() if k != "$defs"}


def test_a_repeated_sub_schema_is_written_once_and_means_the_same() -> None:
    from fedhpc.mcp_server.schema import _walk

    count = {"type": "integer"}
    span = {"type": "object", "properties": {"min": count, "max": count}}
    names = {"type": "array", "items": {"type": "string"}}
    shape = {"type": "object", "properties": {"gpus": span, "cpus": span, "nodes": span}}

    class Job(BaseModel):
        shape: Annotated[dict[str, Any], WithJsonSchema(shape)]
        sites: Annotated[list[str], WithJsonSchema(names)]
        exclude: Annotated[list[str], WithJsonSchema(names)]
        outputs: list[str] = Field(default=[], description="files it writes")

    raw = Job.model_json_schema()
    shared = compact_input(raw)
    assert set(shared["$defs"]) >= {"s0", "s1"}  # string lists and integer ranges
    assert shared["properties"]["outputs"]["description"] == "files it writes"
    assert _resolved(shared, shared["$defs"]) == _resolved(_walk(raw, output=False), {})
    check = Draft202012Validator(shared)
    job = {"shape": {"gpus": {"min": 1, "max": 4}}, "sites": [], "exclude": [], "outputs": ["a"]}
    assert check.is_valid(job)
    assert not check.is_valid({**job, "shape": {"gpus": {"min": "one"}}})
    assert not check.is_valid({**job, "sites": [1]})
