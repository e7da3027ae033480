"""inspect_federation's `fields` (issue 36): each site's named fields only (and the ones that
name it and say whether to trust it), through the real MCP client over stdio, a real daemon on
the process sites; a misspelt field is a `validation` error before anything is asked."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mcp import Client

from tests.integration.daemon_util import running
from tests.integration.mcp_support import stdio_params


def _body(result: Any) -> dict[str, Any]:
    text = result.content[0].text
    body: dict[str, Any] = json.loads(text)
    return body


async def test_fields_keep_each_sites_named_fields_and_a_misspelt_one_is_refused(
    tmp_path: Path,
) -> None:
    env = {"FEDHPC_DEVFED": "process", "FEDHPC_DEVFED_DIR": str(tmp_path / "devfed")}
    home = tmp_path / "h"
    async with (  # the daemon answers before the first call: no autostart, no wait
        running(home, **env),
        Client(stdio_params(home, "--no-autostart", **env), mode="legacy") as client,
    ):
        whole = _body(await client.call_tool("inspect_federation", {}))
        small = await client.call_tool("inspect_federation", {"fields": ["partitions"]})
        bad = await client.call_tool("inspect_federation", {"fields": ["health", "queue"]})
    assert whole["sites"] and all("dialect" in s and "partitions" in s for s in whole["sites"])
    sites = _body(small)["sites"]
    assert [s["site"] for s in sites] == [s["site"] for s in whole["sites"]]
    for s in sites:  # the named field, and what names the site and says whether to trust it
        assert set(s) == {"site", "health", "stale", "partitions"}, s
    assert small.structured_content == _body(small)  # the data validates as the output schema
    assert len(small.content[0].text) < len(json.dumps(whole))  # type: ignore[union-attr]
    assert bad.is_error
    refused = _body(bad)
    assert refused["code"] == "validation"
    [issue] = refused["fields"]
    assert issue["field"] == "fields[1]" and "'queue'" in issue["reason"]
    assert "partitions" in issue["reason"]  # it lists the fields there are
