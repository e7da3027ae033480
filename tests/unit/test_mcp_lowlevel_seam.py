"""The one seam past MCPServer's public surface (fedhpc/mcp_server/lowlevel.py) holds with the
installed SDK, and fails loudly the day the SDK changes it or offers a public way instead."""

from __future__ import annotations

import inspect
from pathlib import Path

import anyio
import pytest
from mcp.client.session import ClientSession
from mcp.server.extension import MethodBinding
from mcp.server.lowlevel import Server
from mcp.server.mcpserver import MCPServer
from mcp.shared.memory import create_client_server_memory_streams
from mcp.types import SubscriptionsListenRequestParams

from fedhpc.mcp_server import build_server
from fedhpc.mcp_server.lowlevel import lowlevel, run
from fedhpc.mcp_server.task_stream import TaskListen
from fedhpc.settings.daemon import DaemonSettings


def _server(tmp_path: Path) -> MCPServer[object]:
    server: MCPServer[object] = build_server(
        DaemonSettings(home=tmp_path / "nodaemon"), autostart=False
    )
    return server


def test_the_listen_handler_served_is_fedhpcs(tmp_path: Path) -> None:
    entry = lowlevel(_server(tmp_path)).get_request_handler("subscriptions/listen")
    assert entry is not None
    assert isinstance(entry.handler, TaskListen)
    assert entry.params_type is SubscriptionsListenRequestParams


def test_a_server_without_the_private_attribute_names_the_seam() -> None:
    class Moved:
        pass

    with pytest.raises(RuntimeError, match=r"mcp_server/lowlevel\.py must follow the SDK"):
        lowlevel(Moved())  # type: ignore[arg-type]


def test_the_sdk_still_offers_no_public_way() -> None:
    """When one of these fails, the SDK changed: use its public way and retire the seam."""
    assert not hasattr(MCPServer, "lowlevel_server")
    with pytest.raises(ValueError, match="spec method"):
        MethodBinding("subscriptions/listen", SubscriptionsListenRequestParams, TaskListen)  # type: ignore[arg-type]
    assert list(inspect.signature(MCPServer.run_stdio_async).parameters) == ["self"]
    # The seam's `run` is what run_stdio_async does on the streams stdio_server() opens.
    source = inspect.getsource(MCPServer.run_stdio_async)
    assert "self._lowlevel_server.run(" in source
    assert "create_initialization_options()" in source


async def test_run_serves_a_client_on_the_callers_streams(tmp_path: Path) -> None:
    server = _server(tmp_path)
    assert isinstance(lowlevel(server), Server)
    async with (
        create_client_server_memory_streams() as (client, served),
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(run, server, *served)
        with anyio.fail_after(10):
            async with ClientSession(*client) as session:
                info = await session.initialize()
                tools = await session.list_tools()
        tg.cancel_scope.cancel()
    assert info.server_info.name == "fedhpc"
    assert "submit_task" in {t.name for t in tools.tools}
