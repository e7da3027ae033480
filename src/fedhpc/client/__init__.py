"""The daemon's client, shared by the CLI, the MCP server and the UI: `daemon_client` (the typed
calls), `wire` (one request over the Unix socket), `errors` (what a call raises when the daemon
cannot answer) and `start` (starting the daemon detached)."""
