"""The MCP server: fedhpc's operations as tools and resources, a thin client of the daemon."""

from fedhpc.mcp_server.server import INSTRUCTIONS, build_server, build_tools
from fedhpc.mcp_server.session_meta import AgentSession, agent_session
from fedhpc.mcp_server.transport import run_http, run_stdio

__all__ = [
    "INSTRUCTIONS",
    "AgentSession",
    "agent_session",
    "build_server",
    "build_tools",
    "run_http",
    "run_stdio",
]
