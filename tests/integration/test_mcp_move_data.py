"""move_data over stdio (`fedhpc serve`, the real MCP client in legacy mode) against a real
daemon on the local federation: a file moves between two sites' storage roots with the local
backend, and the transfer view is read through the resource the event points to."""

from __future__ import annotations

import hashlib
import json
import uuid
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from fedhpc.ops.data import TransferHandle, TransferView
from tests.integration.daemon_util import running
from tests.integration.mcp_support import stdio_params

pytestmark = pytest.mark.devfed


async def _call(client: Client, tool: str, **args: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, args)
    assert not result.is_error, result.content
    assert result.structured_content is not None
    body: dict[str, Any] = result.structured_content  # a tool's structured answer: an object
    return body


async def _view(client: Client, transfer_id: str) -> TransferView:
    read = await client.read_resource(f"fedhpc://transfers/{transfer_id}")
    return TransferView.model_validate(json.loads(read.contents[0].text))  # type: ignore[union-attr]


async def test_move_data_copies_a_file_between_two_sites_and_the_view_shows_it(
    devfed: Any, tmp_path: Path
) -> None:
    run = "mcpx-" + uuid.uuid4().hex[:8]
    src = devfed.root / "devanvil/storage" / run / "data.txt"
    src.parent.mkdir(parents=True)
    src.write_text("".join(f"row {i}\n" for i in range(2000)))
    dst = devfed.root / "devvista/storage" / run / "copy/data.txt"
    home = tmp_path / "h"
    args = {
        "source": f"devanvil:scratch/{run}/data.txt",
        "destination": f"devvista:scratch/{run}/copy/data.txt",
    }
    async with running(home), Client(stdio_params(home, "--no-autostart"), mode="legacy") as client:
        handle = TransferHandle.model_validate(await _call(client, "move_data", **args))
        again = TransferHandle.model_validate(await _call(client, "move_data", **args))
        assert again.transfer_id == handle.transfer_id  # idempotent: one copy
        assert handle.backend == "local"
        # No continuation for this plain client: the answer must not promise a resume.
        assert "End your turn" not in handle.next
        assert "will NOT resume" in handle.next or "Already" in handle.next
        with anyio.fail_after(60):
            while not (view := await _view(client, handle.transfer_id)).state.terminal:
                await anyio.sleep(0.5)
        page = await _call(client, "list_events")
        traversal = await client.call_tool(
            "move_data",
            {
                "source": "devanvil:scratch/../../etc/passwd",
                "destination": f"devvista:scratch/{run}/p",
            },
        )
        unknown = await client.call_tool(
            "move_data", {"source": "nosuchsite:scratch/a", "destination": args["destination"]}
        )
    assert view.state.value == "succeeded", view.error
    digest = hashlib.sha256(dst.read_bytes()).hexdigest()
    assert dst.read_bytes() == src.read_bytes()
    assert view.checksums == {"data.txt": digest}
    assert view.checksum_verified is True
    assert view.bytes == src.stat().st_size
    assert view.source_location is not None
    assert (view.source_location.site, view.destination_location.site) == ("devanvil", "devvista")
    assert view.destination_location.path == str(dst)
    assert view.preview is None  # content only on request
    kinds = [(e["kind"], e["subject"]) for e in page["events"]]
    assert ("transfer.succeeded", handle.transfer_id) in kinds
    assert traversal.is_error
    assert json.loads(traversal.content[0].text)["code"] == "path_traversal"  # type: ignore[union-attr]
    assert not (devfed.root / "devvista/storage" / run / "p").exists()
    assert unknown.is_error
    assert json.loads(unknown.content[0].text)["code"] == "unknown_site"  # type: ignore[union-attr]
