"""The daemon's validation errors (daemon/guard.py): pydantic's "Value error, " prefix is gone,
and a check across the whole body names the fields its message names, else "(body)" with a
reason that says it is about the body as a whole. Through the real app on a real store."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import httpx2
import pytest
from pydantic import ValidationError

from fedhpc.daemon import api
from fedhpc.daemon.app import build_app
from fedhpc.daemon.guard import validation_issues
from fedhpc.domain.envelope import ResourceEnvelope
from fedhpc.ops.draft import DraftRequest
from fedhpc.store import Store
from tests.unit.daemon_support import daemon_state


@pytest.fixture
async def http(store: Store) -> AsyncIterator[httpx2.AsyncClient]:
    transport = httpx2.ASGITransport(app=build_app(daemon_state(store)))
    async with httpx2.AsyncClient(transport=transport, base_url="http://fedhpc") as c:
        yield c


async def test_a_model_level_error_names_the_fields_it_concerns(http: httpx2.AsyncClient) -> None:
    body = {"command": ["true"], "envelope": {}, "policy": "fixed-site"}
    resp = await http.post(api.SUBMIT_TASK.url(), content=json.dumps(body))
    answer = resp.json()
    assert resp.status_code == 422 and answer["code"] == "validation", answer
    why = "policy fixed-site needs fixed_site (the site to run on)"
    assert answer["fields"] == [
        {"field": "policy", "reason": why},
        {"field": "fixed_site", "reason": why},
    ]
    assert "Value error" not in json.dumps(answer)


async def test_a_nested_model_error_keeps_its_path_without_the_prefix(
    http: httpx2.AsyncClient,
) -> None:
    body = {"command": ["true"], "envelope": {"gpus": {"min": 2, "max": 1}}}
    answer = (await http.post(api.SUBMIT_TASK.url(), content=json.dumps(body))).json()
    assert answer["fields"] == [{"field": "envelope.gpus", "reason": "max (1) is below min (2)"}]


def test_a_whole_body_error_naming_no_field_says_so() -> None:
    with pytest.raises(ValidationError) as exc:
        ResourceEnvelope.model_validate({"sites_include": ["a"], "sites_exclude": ["a"]})
    ((field, reason),) = [(i.field, i.reason) for i in validation_issues(exc.value)]
    assert field == "(body)"
    assert reason == "the ResourceEnvelope body as a whole: sites both included and excluded: ['a']"


def test_a_field_named_with_its_subfield_counts() -> None:
    with pytest.raises(ValidationError) as exc:
        DraftRequest.model_validate({"description": "x", "code_context": ["y" * 20000] * 2})
    issues = validation_issues(exc.value)
    assert [i.field for i in issues] == ["code_context"], issues
    assert issues[0].reason.startswith("code_context holds 40000 characters in all")
