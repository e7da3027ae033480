"""The one place fedhpc reaches past `MCPServer`'s public surface, to the SDK's lowlevel
`Server` it wraps (mcp 2.3 keeps it private as `_lowlevel_server`; its own
`mcp/client/_memory.py` has "TODO: Make `lowlevel_server` public").

Two things need it, and mcp 2.3 has no public way to do either:
- replacing a spec method's handler (`subscriptions/listen`, for the Tasks extension's
  `taskIds`): an `Extension`'s `MethodBinding` refuses spec methods, and its own docs send
  the caller to the lowlevel `Server.add_request_handler`;
- serving on streams we opened (`run_stdio` reads a guarded stdin): `MCPServer` only runs on
  the streams its transports open; `run_stdio_async` is this module's `run` on its own.

`tests/unit/test_mcp_lowlevel_seam.py` fails loudly when the SDK changes any of this (the
attribute moves, or a public way appears)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from mcp.server.lowlevel import Server
from mcp.server.mcpserver import MCPServer
from pydantic import BaseModel

__all__ = ["lowlevel", "replace_handler", "run"]


def lowlevel(server: MCPServer[Any]) -> Server[Any]:
    """The lowlevel `Server` behind `server`; RuntimeError naming this seam when the SDK no
    longer keeps one where mcp 2.3 does."""
    inner = getattr(server, "_lowlevel_server", None)
    if not isinstance(inner, Server):
        raise RuntimeError(
            "mcp's MCPServer no longer holds its lowlevel Server at `_lowlevel_server`: "
            "fedhpc/mcp_server/lowlevel.py must follow the SDK"
        )
    return inner


def replace_handler(
    server: MCPServer[Any],
    method: str,
    params_type: type[BaseModel],
    handler: Callable[..., Awaitable[Any]],
) -> None:
    """Serve a spec request `method` with `handler` instead of the SDK's own."""
    lowlevel(server).add_request_handler(method, params_type, handler)


async def run(server: MCPServer[Any], read_stream: Any, write_stream: Any) -> None:
    """Serve one client on streams the caller opened, as `MCPServer.run_stdio_async` does on
    the ones `stdio_server()` opens."""
    inner = lowlevel(server)
    await inner.run(read_stream, write_stream, inner.create_initialization_options())
