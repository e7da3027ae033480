"""move_data through the real MCP server over stdio wakes the calling agent once per outcome,
the continuation travelling in the request and stored with the transfer: a real daemon on
private local-process sites (no Slurm; nothing shared with the Slurm federation), the local
transfer backend, and the resume bridge's command runtime (the "agent" appends each payload it
is woken with to a file)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
from mcp import Client

from fedhpc.client.daemon_client import DaemonClient
from tests.integration.daemon_util import running, settled
from tests.integration.mcp_support import stdio_params


def _woken(log: Path) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    return [json.loads(x) for x in log.read_text().splitlines() if x.strip()]


async def _delivered(client: DaemonClient, n: int) -> None:
    with anyio.fail_after(60):
        while len([d for d in await client.deliveries() if d.state == "delivered"]) < n:
            await anyio.sleep(0.3)
    assert len(await settled(client, cycles=2)) == n  # more cycles: nothing else arrives


async def test_move_data_wakes_its_agent_once_for_each_outcome(tmp_path: Path) -> None:
    fed, home, log = tmp_path / "devfed", tmp_path / "h", tmp_path / "agent.log"
    (fed / "devanvil" / "storage" / "run").mkdir(parents=True)
    (fed / "devanvil" / "storage" / "run" / "in.dat").write_text("twelve bytes")
    (fed / "devvista" / "storage").mkdir(parents=True)  # the destination's storage root
    env = {"FEDHPC_DEVFED": "process", "FEDHPC_DEVFED_DIR": str(fed)}
    agent = {
        "runtime": "command",
        "command": ["bash", "-c", 'cat >> "$1"; echo >> "$1"', "agent", str(log)],
    }
    serve = stdio_params(home, "--no-autostart", **env, FEDHPC_CONTINUATION=json.dumps(agent))
    async with running(home, **env) as daemon, Client(serve, mode="legacy") as client:
        handles = []
        for source in ("devanvil:scratch/run/in.dat", "devanvil:scratch/run/missing.dat"):
            name = source.rsplit("/", 1)[1]
            result = await client.call_tool(
                "move_data", {"source": source, "destination": f"devvista:scratch/run/{name}"}
            )
            assert not result.is_error, result.content
            handle = result.structured_content
            assert handle is not None
            assert "End your turn" in handle["next"]
            handles.append(handle["transfer_id"])
        await _delivered(daemon, 2)
    woken = {w["transfer_id"]: w for w in _woken(log)}
    assert len(_woken(log)) == 2
    assert woken[handles[0]]["event"] == "transfer.succeeded"
    assert woken[handles[1]]["event"] == "transfer.failed"
    assert (fed / "devvista" / "storage" / "run" / "in.dat").read_text() == "twelve bytes"
