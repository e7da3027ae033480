"""Every `FEDHPC_*` environment variable in one registry (name, type, default, meaning, reader;
what one is: `setting.py`), and the only package that reads them; the variables fedhpc honours
but does not own (OTHERS, `others.py`: XDG_STATE_HOME, NO_COLOR, Globus credentials...) are read
here too. Values are read when asked for, not snapshotted at import: a test's monkeypatch, a
child's environment and a daemon started later all see what is set. Code that puts a variable
into a child's environment names it with `SETTING.name`. The daemon's tunables are the fields of
`DaemonSettings` (`fedhpc.settings.daemon`; apart, so this module imports no pydantic).
docs/settings.md is generated from this registry (`fedhpc_dev.settings_docs`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

from fedhpc.settings.others import OTHERS, XDG_STATE_HOME
from fedhpc.settings.setting import Bounds, Setting, registrar, shown

__all__ = [
    "OTHERS",
    "SETTINGS",
    "Bounds",
    "Setting",
    "daemon_values",
    "fedhpc_home",
    "lookup",
    "shown",
    "state_dir",
]

SETTINGS: list[Setting] = []


def _reader(reader: str, *, daemon: bool = False) -> Callable[..., Setting]:
    return registrar(SETTINGS, reader, daemon=daemon)


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
STORE_URL = _reader("daemon, `fedhpc store`")(
    "STORE_URL",
    "url",
    None,
    "the store: unset, SQLite at `$FEDHPC_HOME/fedhpc.db`; `postgresql://USER@HOST:PORT/DB`, "
    "that PostgreSQL database (docs/store.md; a password belongs in `~/.pgpass`)",
)
LOG_LEVEL = _every(
    "LOG_LEVEL", "level", "WARNING", "structlog level on stderr (an unknown name means WARNING)"
)

# The daemon's tunables: DaemonSettings validates them (a bad value stops the daemon's start).
REFRESH_S = _daemon("REFRESH_S", "seconds", 60.0, "collector refresh interval", gt=0)
PROBE_TIMEOUT_S = _daemon(
    "PROBE_TIMEOUT_S", "seconds", 30.0, "a site probe is abandoned after this long", gt=0
)
HISTORY_KEEP = _daemon("HISTORY_KEEP", "int", 1440, "snapshots kept per site", ge=1)
GRACE_S = _daemon("GRACE_S", "seconds", 10.0, "SIGTERM grace before cancelling", ge=0)
CYCLE_S = _daemon("CYCLE_S", "seconds", 10.0, "orchestrator control cycle", gt=0)
STALL_S = _daemon(
    "STALL_S", "seconds", 15.0, "a group's lone pending child is re-placed after this long", gt=0
)
BRIDGE_POLL_S = _daemon(
    "BRIDGE_POLL_S",
    "seconds",
    1.0,
    "the resume bridge's poll interval (it is also woken after each control cycle)",
    gt=0,
)
BRIDGE_ATTEMPTS = _daemon(
    "BRIDGE_ATTEMPTS", "int", 4, "resumes tried before a delivery is dead", ge=1
)
BRIDGE_BACKOFF_S = _daemon(
    "BRIDGE_BACKOFF_S",
    "seconds",
    5.0,
    "first retry delay, doubling (5, 10, 20 s), at most 300 s",
    gt=0,
)
RESUME_TIMEOUT_S = _daemon(
    "RESUME_TIMEOUT_S",
    "seconds",
    1800.0,
    "a resumed turn is stopped after this long in any case",
    gt=0,
)
RESUME_WARM_MCP = _daemon(
    "RESUME_WARM_MCP",
    "bool",
    True,
    "Claude resumes use the warm loopback HTTP MCP server, Codex resumes the preloaded "
    "stdio server host (0: each resume starts its own `fedhpc serve`)",
)
RESUME_DAEMON_WAIT_S = _daemon(
    "RESUME_DAEMON_WAIT_S",
    "seconds",
    30.0,
    "a resumed Claude turn's fedhpc call (warm MCP server) waits this long for a restarting "
    "daemon; a turn whose calls still could not reach it is delivered again, once",
    ge=0,
    le=600,
)
RESUME_START_TIMEOUT_S = _daemon(
    "RESUME_START_TIMEOUT_S",
    "seconds",
    120.0,
    "a resume whose model has not answered by then is stopped (a dead endpoint)",
    gt=0,
)
INTENT_GRACE_S = _daemon(
    "INTENT_GRACE_S", "seconds", 45.0, "after a crash, resubmit an unseen intent this late", ge=1
)
SITE_LOST_S = _daemon(
    "SITE_LOST_S", "seconds", 300.0, "offline this long: stuck work wakes the agent", ge=0
)
ESTIMATE_TIMEOUT_S = _daemon(
    "ESTIMATE_TIMEOUT_S",
    "seconds",
    2.0,
    "placement waits this long for a site's sbatch --test-only answer",
    gt=0,
    le=60,
)
COMMAND_TIMEOUT_S = _daemon(
    "COMMAND_TIMEOUT_S",
    "seconds",
    30.0,
    "a scheduler command (squeue, sacct, a job looked up by name, sbatch, scancel) is "
    "abandoned after this long",
    gt=0,
    le=600,
)
PING_TIMEOUT_S = _daemon(
    "PING_TIMEOUT_S",
    "seconds",
    5.0,
    "a site's controller that does not answer its ping (`scontrol ping`, `qstat -B`, `lsid`) "
    "within this, twice in a row, takes the site offline; an observation's ping gets half a "
    "control cycle, never more than this",
    gt=0,
    le=120,
)
SUBMITS_PER_CYCLE = _daemon(
    "SUBMITS_PER_CYCLE",
    "int",
    100,
    "new jobs sent to one site per control cycle at most (good citizenship)",
    ge=1,
    le=10_000,
)
ARRAY_MAX = _reader("daemon's submissions")(
    "ARRAY_MAX",
    "int",
    1000,
    "group children alike go to a Slurm, PBS or LSF site as job arrays of at most this many "
    "elements (1: no arrays, one job each)",
)
LOOP_WATCH_S = _daemon(
    "LOOP_WATCH_S",
    "seconds",
    0.0,
    "diagnostic: log each event-loop stall longer than this, with where it was (0: off)",
    ge=0,
)
LEASE_S = _daemon(
    "LEASE_S",
    "seconds",
    15.0,
    "on a PostgreSQL store: the leader's lease, renewed every third of it; a daemon paused "
    "past it may not write again once another has taken over (docs/store.md)",
    gt=0,
)
EVENTS_KEEP_DAYS = _daemon(
    "EVENTS_KEEP_DAYS",
    "days",
    30.0,
    "delivered events older than this move to <home>/archive (0: never)",
    ge=0,
    le=3650,
)
PLACE_WAIT_S = _daemon(
    "PLACE_WAIT_S",
    "seconds",
    2.0,
    "a submit_task (or replan) answer waits this long at most for the task's placement, so that "
    "it names the site; past it the answer is `queued` and the placement comes as an event "
    "(0: answer as soon as the task is durably queued)",
    ge=0,
    le=600,
)
RETRY_WINDOW_S = _daemon(
    "RETRY_WINDOW_S",
    "seconds",
    120.0,
    "the same request from the same caller this soon is a retry (same task)",
    ge=0,
    le=86400,
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
DEVFED = _reader("devfed profile source")(
    "DEVFED",
    "1|process|pbs|slurm+pbs",
    None,
    "the dev* sites without a user config: the four on Slurm (1) or as local processes "
    "(process), devpolaris on OpenPBS (pbs), or all five (slurm+pbs)",
)
DEVFED_DIR = _reader("devfed profile source, devfed")(
    "DEVFED_DIR",
    "path",
    "/var/tmp/fedhpc-devfed",  # noqa: S108 (the root-owned test federation)
    "where the local test federation keeps its clusters",
)
DEVFED_SSH_CONFIG = _reader("devfed profile source")(
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
PROCESS_SCHEDULER = _reader("process dialect")(
    "PROCESS_SCHEDULER",
    "module",
    "fedhpc_dev.localsched",
    "the module the `process` dialect's sites run with `python -m` as their batch scheduler "
    "(the development tooling's local-process scheduler)",
)
JOB_FOR = _reader("the job itself (the daemon sets it)")(
    "FOR",
    "str",
    None,
    "in service mode, the person (`issuer|sub`) a job runs for, in that job's environment",
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
OPENPBS_TARBALL = _reader("devfed")(
    "OPENPBS_TARBALL",
    "path",
    None,
    "the OpenPBS source tarball devfed builds devpolaris from (unset: the newest "
    "`openpbs-*.tar.gz` in the checkout's `../shared/vendor/`, when present)",
)

# The test suite, benchmarks and ./dev (read outside the package).
REQUIRE_REAL = _tests(
    "REQUIRE_REAL",
    "flag",
    None,
    "a missing real component (Slurm, sshd, a CLI) fails its test instead of skipping it",
)
FUZZ_CASES = _tests("FUZZ_CASES", "int", 1000, "hypothesis cases per tool in the MCP fuzz test")
TEST_CPU = _tests(
    "TEST_CPU",
    "flag",
    None,
    "1: the test run measures each test's CPU, with all it starts, in a cgroup (root); the "
    "summary lists CPU per scope and the tests that used the most",
)
TEST_WORKERS = _tests(
    "TEST_WORKERS",
    "int",
    4,
    "pytest-xdist workers of `./dev test` (one per Slurm half first, the rest beside)",
)
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
PYTHON = _reader("./dev")(
    "PYTHON",
    "path",
    None,
    "the interpreter ./dev makes a new .venv from (unset: /usr/bin/python3 if 3.11 or newer, "
    "else python3)",
)

_BY_NAME = {s.name: s for s in (*SETTINGS, *OTHERS)}


def lookup(name: str) -> Setting:
    """The registered variable (owned or honoured) called `name`; KeyError names it if none."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"{name} is not a registered fedhpc setting") from None


def state_dir() -> Path:
    """`$XDG_STATE_HOME`, else `~/.local/state`: where fedhpc's own folders go by default."""
    return Path(XDG_STATE_HOME.read() or Path.home() / ".local" / "state")


def fedhpc_home() -> Path:
    """The user's state folder: `$FEDHPC_HOME`, else `$XDG_STATE_HOME/fedhpc`."""
    if env := HOME.read():
        return Path(env)
    return state_dir() / "fedhpc"


def daemon_values(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The daemon tunables set in `env` (default: this process's environment), by field name,
    unparsed: DaemonSettings validates them."""
    return {s.field: v for s in SETTINGS if s.field and (v := s.read(env)) is not None}
