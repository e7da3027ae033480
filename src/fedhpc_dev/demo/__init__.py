"""The end-to-end demo: a scripted agent drives fedhpc through a real MCP client."""

__all__: list[str] = []
