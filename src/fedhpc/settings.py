"""Every `FEDHPC_*` environment variable in one registry (name, type, default, meaning, reader),
and the only module that reads them. Values are read when asked for, not snapshotted at import:
a test's monkeypatch, a child's environment and a daemon started later all see what is set.
Code that puts a variable into a child's environment names it with `SETTING.name`.

`python -m fedhpc.settings` prints the table docs/settings.md carries (`--write` updates it)."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from fedhpc.errors import FieldIssue, ValidationFailed

__all__ = [
    "SETTINGS",
    "Setting",
    "daemon_values",
    "invalid",
    "lookup",
    "markdown_table",
]

Default = str | int | float | bool | None


@dataclass(frozen=True)
class Setting:
    """One variable: what it holds, its default (None: unset), what it means, who reads it.
    `field` is the `DaemonSettings` field it sets, for the daemon's tunables."""

    name: str
    type: str
    default: Default
    meaning: str
    reader: str
    field: str | None = None

    def read(self, env: Mapping[str, str] | None = None) -> str | None:
        """The raw value in `env` (default: this process's environment now), else None."""
        return (os.environ if env is None else env).get(self.name)

    def get(self, env: Mapping[str, str] | None = None) -> str | None:
        """The raw value when set (even empty), else the default as text (None: no default)."""
        value = self.read(env)
        if value is not None or self.default is None:
            return value
        return _shown(self.default)


SETTINGS: list[Setting] = []


def _reader(reader: str, *, daemon: bool = False) -> Callable[[str, str, Default, str], Setting]:
    """A registrar for the variables `reader` reads; a daemon tunable sets the same-named
    (lower-case) DaemonSettings field."""

    def register(name: str, type_: str, default: Default, meaning: str) -> Setting:
        field = name.lower() if daemon else None
        setting = Setting(f"FEDHPC_{name}", type_, default, meaning, reader, field)
        SETTINGS.append(setting)
        return setting

    return register


_every, _loader, _bridge = (
    _reader("every command"),
    _reader("profiles loader"),
    _reader("resume bridge"),
)
_daemon, _tests = _reader("daemon", daemon=True), _reader("tests")

# Where things live.
HOME = _every(
    "HOME",
    "path",
    None,
    "the state folder: daemon socket, store, log, config, "
    "profiles, Globus tokens (unset: `$XDG_STATE_HOME/fedhpc`, i.e. `~/.local/state/fedhpc`)",
)
CONFIG = _loader("CONFIG", "path", None, "the user config (unset: `$FEDHPC_HOME/config.toml`)")
LOG_LEVEL = _every(
    "LOG_LEVEL", "level", "WARNING", "structlog level on stderr (an unknown name means WARNING)"
)

# The daemon's tunables: DaemonSettings validates them (a bad value stops the daemon's start).
REFRESH_S = _daemon("REFRESH_S", "seconds > 0", 60.0, "collector refresh interval")
PROBE_TIMEOUT_S = _daemon(
    "PROBE_TIMEOUT_S", "seconds > 0", 30.0, "a site probe is abandoned after this long"
)
HISTORY_KEEP = _daemon("HISTORY_KEEP", "int >= 1", 1440, "snapshots kept per site")
GRACE_S = _daemon("GRACE_S", "seconds >= 0", 10.0, "SIGTERM grace before cancelling")
CYCLE_S = _daemon("CYCLE_S", "seconds > 0", 10.0, "orchestrator control cycle")
INTENT_GRACE_S = _daemon(
    "INTENT_GRACE_S", "seconds >= 1", 45.0, "after a crash, resubmit an unseen intent this late"
)
SITE_LOST_S = _daemon(
    "SITE_LOST_S", "seconds >= 0", 300.0, "offline this long: stuck work wakes the agent"
)
RETRY_WINDOW_S = _daemon(
    "RETRY_WINDOW_S",
    "seconds, 0..86400",
    120.0,
    "the same request from the same caller this soon is a retry (same task)",
)
ESTIMATE_TIMEOUT_S = _daemon(
    "ESTIMATE_TIMEOUT_S",
    "seconds, 0..60",
    2.0,
    "placement waits this long for a site's sbatch --test-only answer",
)
SUBMITS_PER_CYCLE = _daemon(
    "SUBMITS_PER_CYCLE",
    "int, 1..10000",
    100,
    "new jobs sent to one site per control cycle at most (good citizenship)",
)
EVENTS_KEEP_DAYS = _daemon(
    "EVENTS_KEEP_DAYS",
    "days, 0..3650",
    30.0,
    "delivered events older than this move to <home>/archive (0: never)",
)
BRIDGE_POLL_S = _daemon("BRIDGE_POLL_S", "seconds > 0", 1.0, "resume bridge poll")
BRIDGE_ATTEMPTS = _daemon("BRIDGE_ATTEMPTS", "int >= 1", 4, "resumes tried before dead")
BRIDGE_BACKOFF_S = _daemon("BRIDGE_BACKOFF_S", "seconds > 0", 5.0, "first retry delay, doubling")
RESUME_TIMEOUT_S = _daemon(
    "RESUME_TIMEOUT_S", "seconds > 0", 1800.0, "a resumed turn is killed after this long"
)
RESUME_START_TIMEOUT_S = _daemon(
    "RESUME_START_TIMEOUT_S",
    "seconds > 0",
    120.0,
    "...or when the model has not answered it by then",
)
RESUME_WARM_MCP = _daemon(
    "RESUME_WARM_MCP", "bool", True, "Claude resumes use one warm HTTP MCP server (else stdio)"
)

# The MCP server, the daemon's client and the resume bridge.
CLIENT_TIMEOUT_SCALE = _reader("daemon client (MCP server, CLI)")(
    "CLIENT_TIMEOUT_SCALE",
    "float > 0",
    1.0,
    "stretches or shrinks the client's per-operation time limits (a bad value means 1)",
)
CONTINUATION = _reader("MCP server")(
    "CONTINUATION", "JSON", None, "a fixed ContinuationSpec for scripted agents"
)
MCP_TOKEN = _reader("fedhpc serve --http")(
    "MCP_TOKEN", "secret", None, "the bearer token the HTTP MCP server requires"
)
CLAUDE_BIN = _bridge(
    "CLAUDE_BIN", "path", None, "the Claude Code CLI, when `[resume.claude_code] binary` is not set"
)
CODEX_BIN = _bridge(
    "CODEX_BIN", "path", None, "the Codex CLI, when `[resume.codex] binary` is not set"
)

# Globus.
GLOBUS_IDENTITY = _reader("Globus transfer and compute")(
    "GLOBUS_IDENTITY",
    "user|service|auto",
    "auto",
    "which Globus identity a service uses (auto: its client credentials when both are set)",
)
GLOBUS_CLIENT_ID = _reader("fedhpc login")(
    "GLOBUS_CLIENT_ID",
    "UUID",
    None,
    "the native Globus client to log in with (unset: the last login's)",
)

# The local test federation and its schedulers.
DEVFED = _loader(
    "DEVFED",
    "1|process",
    None,
    "the four dev* sites without a user config: on Slurm (1) or as local processes (process)",
)
DEVFED_DIR = _reader("profiles loader, devfed")(
    "DEVFED_DIR",
    "path",
    "/var/tmp/fedhpc-devfed",  # noqa: S108 (the root-owned test federation)
    "where the local test federation keeps its clusters",
)
DEVFED_SSH_CONFIG = _loader(
    "DEVFED_SSH_CONFIG",
    "path",
    None,
    "the devfed SSH front's ssh_config: the Slurm dev sites are reached over ssh",
)
LOCALSCHED_ROOT = _reader("localsched")(
    "LOCALSCHED_ROOT",
    "path",
    None,
    "the local-process scheduler's state folder (set in a process site's transport env)",
)
LOGIN = _reader("devfed sshd")(
    "LOGIN",
    "str",
    None,
    "a devfed SSH login's own marker, the one variable besides SLURM_CONF a login may set",
)
NO_PROGRESS = _reader("devfed")(
    "NO_PROGRESS", "flag", None, "any value turns the `fedhpc devfed up` progress bar off"
)

# The test suite, benchmarks and ./dev (read outside the package).
REQUIRE_REAL = _tests(
    "REQUIRE_REAL",
    "flag",
    None,
    "a missing real component (Slurm, sshd, a CLI) fails its test instead of skipping it",
)
FUZZ_CASES = _tests("FUZZ_CASES", "int", 1000, "hypothesis cases per tool in the MCP fuzz test")
UPDATE_SCREENSHOTS = _tests(
    "UPDATE_SCREENSHOTS", "1", None, "the dashboard test refreshes docs/img/"
)
NPM_CACHE = _tests(
    "NPM_CACHE",
    "path",
    "/tmp/fedhpc-npm",  # noqa: S108 (a cache)
    "where tests cache the real Claude Code and Codex CLIs",
)
DEVFED_TEST_LOCK = _reader("tests, benchmarks")(
    "DEVFED_TEST_LOCK",
    "path",
    "/tmp/fedhpc-devfed-tests.lock",  # noqa: S108 (shared by every test run)
    "the lock a run holds on the shared federation",
)
E2E_MARK = _tests(
    "E2E_MARK", "str", None, "marks one end-to-end test's processes, to find their network peers"
)
VENV = _reader("./dev")("VENV", "path", ".venv", "the virtual environment ./dev makes and uses")

_BY_NAME = {s.name: s for s in SETTINGS}


def lookup(name: str) -> Setting:
    """The registered variable called `name` (KeyError names it when there is none)."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"{name} is not a registered fedhpc setting") from None


def daemon_values(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The daemon tunables set in `env` (default: this process's environment), by field name,
    unparsed: DaemonSettings validates them."""
    return {s.field: v for s in SETTINGS if s.field and (v := s.read(env)) is not None}


def invalid(exc: ValidationError, values: Mapping[str, str]) -> ValidationFailed | None:
    """A typed error naming each variable whose value (in `values`, from `daemon_values`) failed
    `exc`; None when the failure is not about one of them (the caller re-raises `exc`)."""
    by_field = {s.field: s for s in SETTINGS if s.field in values}
    issues = []
    for err in exc.errors():
        if (setting := by_field.get(str(err["loc"][0]) if err["loc"] else "")) is not None:
            reason = f"{values[setting.field or '']!r}: {err['msg']} (expected {setting.type})"
            issues.append(FieldIssue(setting.name, reason))
    if not issues:
        return None
    names = ", ".join(i.field for i in issues)
    return ValidationFailed(issues, hint=f"Fix or unset {names} (docs/settings.md).")


def _shown(default: str | float | bool) -> str:
    if isinstance(default, bool):
        return "1" if default else "0"
    if isinstance(default, float) and default.is_integer():
        return str(int(default))
    return str(default)


def markdown_table() -> str:
    """The settings table of docs/settings.md, one row per variable, in registry order."""
    rows = ["| variable | type | default | meaning | read by |", "|---|---|---|---|---|"]
    for s in SETTINGS:
        default = "—" if s.default is None else f"`{_shown(s.default)}`"
        cells = (f"`{s.name}`", s.type, default, s.meaning, s.reader)
        rows.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(rows) + "\n"


BEGIN = "<!-- settings table: generated by `python -m fedhpc.settings --write` -->"
END = "<!-- end of the generated table -->"


def with_table(text: str) -> str:
    """`text` (a Markdown page) with the generated table between its BEGIN and END markers."""
    pattern = re.compile(re.escape(BEGIN) + r"\n.*?" + re.escape(END), re.DOTALL)
    if not pattern.search(text):
        raise ValueError(f"no {BEGIN!r} ... {END!r} block to fill")
    return pattern.sub(lambda _: f"{BEGIN}\n{markdown_table()}{END}", text, count=1)


def main(argv: list[str]) -> int:
    """Print the table, or with `--write PAGE` put it into PAGE (default docs/settings.md)."""
    if argv[:1] == ["--write"]:
        page = Path(argv[1] if len(argv) > 1 else "docs/settings.md")
        page.write_text(with_table(page.read_text()))
        return 0
    sys.stdout.write(markdown_table())
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
