"""The variables fedhpc honours but does not own (XDG_STATE_HOME, NO_COLOR, the CLIs' folders,
the Globus service credentials): registered as `OTHERS`, beside fedhpc's own in
`fedhpc.settings`, and read through the same `Setting`."""

from __future__ import annotations

from fedhpc.settings.setting import Setting

__all__ = [
    "CLAUDE_CONFIG_DIR",
    "CODEX_HOME",
    "COMPUTE_CLIENT_ID",
    "COMPUTE_CLIENT_SECRET",
    "NO_COLOR",
    "OTHERS",
    "TRANSFER_CLIENT_ID",
    "TRANSFER_CLIENT_SECRET",
    "XDG_STATE_HOME",
]

OTHERS: list[Setting] = []


def _other(name: str, type_: str, meaning: str, reader: str) -> Setting:
    setting = Setting(name, type_, None, meaning, reader)
    OTHERS.append(setting)
    return setting


XDG_STATE_HOME = _other(
    "XDG_STATE_HOME", "path", "the default home's parent (unset: `~/.local/state`)", "every command"
)
NO_COLOR = _other("NO_COLOR", "flag", "any value turns terminal colours off", "CLI")
CLAUDE_CONFIG_DIR = _other(
    "CLAUDE_CONFIG_DIR",
    "path",
    "Claude Code's folder (unset: `~/.claude`): session transcripts",
    "resume bridge",
)
CODEX_HOME = _other(
    "CODEX_HOME",
    "path",
    "Codex's folder (unset: `~/.codex`): skills install, resume checks, session transcripts",
    "fedhpc skills, resume bridge",
)
COMPUTE_CLIENT_ID = _other(
    "GLOBUS_COMPUTE_CLIENT_ID",
    "UUID",
    "with its secret: Compute's service identity",
    "Globus compute",
)
COMPUTE_CLIENT_SECRET = _other(
    "GLOBUS_COMPUTE_CLIENT_SECRET", "secret", "the service identity's secret", "Globus compute"
)
TRANSFER_CLIENT_ID = _other(
    "GLOBUS_CLIENT_ID",
    "UUID",
    "with its secret: Transfer's service identity; alone: a native client to log in with",
    "Globus transfer, fedhpc login",
)
TRANSFER_CLIENT_SECRET = _other(
    "GLOBUS_CLIENT_SECRET", "secret", "the service identity's secret", "Globus transfer"
)
