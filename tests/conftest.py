"""Shared fixtures: an isolated fedhpc home for every test, and the canary folder."""

from __future__ import annotations

import io
import os
import sys
import time
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any, TextIO, cast

import pytest
from pluggy import Result

from fedhpc.logs import configure_logging
from fedhpc.settings import DEVFED_DIR, TEST_CPU
from fedhpc_dev.devfed.instances import instance_root, read_instance
from fedhpc_dev.profiles import devfed_root
from tests.cpu_usage import CPU_KEY, CpuPerTest

# What a run may leave in the checkout's root: tools' caches (git ignores them).
_CACHES = {".pytest_cache", ".hypothesis", ".mypy_cache", ".ruff_cache", "__pycache__", ".venv"}
_BEFORE = pytest.StashKey[set[str]]()
_LEFT = pytest.StashKey[list[str]]()


def _root_entries(config: pytest.Config) -> set[str]:
    """The checkout's root is pytest's rootdir: the folder of pyproject.toml, which holds the
    pytest settings (tests/unit/test_suite_hooks.py runs these hooks in a rootdir of its own)."""
    return {p.name for p in config.rootpath.iterdir()} - _CACHES


# Every test has a time budget: a `budget(seconds)` mark, else these. A test that passes but
# takes over 3x its budget fails, saying so (the limits leave room for a loaded 2-core CI).
_BUDGET_UNIT = 20.0
_BUDGET_INTEGRATION = 60.0


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "budget(seconds): the test's time budget (fails at 3x)")
    # The daemon's own log format in every test process: key-value lines, plain tracebacks.
    # Unconfigured, structlog renders each logged exception with rich, every frame's locals
    # included: 2-6 s of CPU per `log.exception` (a 10 s unit-test wait ran out so under load).
    # Every level passes, as unconfigured (capture_logs sees debug lines); each line goes to
    # the stderr of the moment (pytest swaps it for each test's capture).
    configure_logging("debug", stream=cast(TextIO, _Stderr()))
    cpu = TEST_CPU.read() == "1"
    if cpu:
        config.pluginmanager.register(CpuPerTest(config), "fedhpc-cpu-per-test")
    config.pluginmanager.register(ScopeTimes(cpu), "fedhpc-scope-times")


class _Stderr(io.TextIOBase):
    """Whatever `sys.stderr` is when a line is written."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


class ScopeTimes:
    """The time each scheduling scope took (`_scope`), printed after the slowest tests: one
    worker runs each Slurm half a test at a time, so they are the suite's long poles. Under
    xdist the controller hears every worker's reports, and prints each worker's busy time and
    when its last test ended (the run's tail: which worker finished last, after what)."""

    def __init__(self, cpu: bool) -> None:
        self.scopes: dict[str, list[float]] = {}  # scope -> [tests, seconds, CPU seconds]
        self.started = time.monotonic()
        self.workers: dict[str, list[Any]] = {}  # worker -> [busy seconds, ended at, last scope]
        self.cpu: dict[str, float] | None = {} if cpu else None  # test -> CPU seconds

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        name = _scope(report.nodeid)
        scope = "unit tests" if name == report.nodeid else name
        tally = self.scopes.setdefault(scope, [0, 0, 0])
        tally[0] += report.when == "call"
        tally[1] += report.duration
        cpu = dict(report.user_properties).get(CPU_KEY)
        if self.cpu is not None and isinstance(cpu, float | int):
            tally[2] += cpu
            self.cpu[report.nodeid] = self.cpu.get(report.nodeid, 0.0) + cpu
        node = getattr(report, "node", None)
        if node is not None:  # an xdist worker's report, heard by the controller
            worker = self.workers.setdefault(node.gateway.id, [0.0, 0.0, ""])
            worker[0] += report.duration
            worker[1] = time.monotonic() - self.started
            worker[2] = scope

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not self.scopes:
            return
        terminalreporter.write_sep("=", "time per scheduling scope (setup + call + teardown)")
        cpu = bool(self.cpu)  # measured (FEDHPC_TEST_CPU=1, and a cgroup could be joined)
        for name, (tests, secs, used) in sorted(self.scopes.items(), key=lambda kv: -kv[1][1])[:8]:
            used_s = f"  cpu {used:7.1f} s" if cpu else ""
            terminalreporter.write_line(f"{secs:8.1f} s{used_s}  {int(tests):5d} tests  {name}")
        for worker, (busy, ended, last) in sorted(self.workers.items(), key=lambda kv: kv[1][1]):
            terminalreporter.write_line(
                f"worker {worker}: busy {busy:.0f} s, last test ended at {ended:.0f} s ({last})"
            )
        if self.cpu is not None:
            self._cpu_summary(terminalreporter)

    def _cpu_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        assert self.cpu is not None
        if not self.cpu:
            terminalreporter.write_line(
                f"{TEST_CPU.name}: CPU not measured (no cgroup to join: it needs root and "
                "cgroup v1 cpuacct or v2; tests/cpu_usage.py)"
            )
            return
        total = sum(self.cpu.values())
        terminalreporter.write_sep("=", f"most CPU (the test and all it started; {total:.0f} s)")
        for nodeid, used in sorted(self.cpu.items(), key=lambda kv: -kv[1])[:15]:
            terminalreporter.write_line(f"{used:7.1f} s  {nodeid}")
        files: dict[str, list[float]] = {}
        for nodeid, used in self.cpu.items():
            tally = files.setdefault(nodeid.split("::", 1)[0], [0.0, 0])
            tally[0] += used
            tally[1] += 1
        terminalreporter.write_sep("=", "most CPU per file")
        for path, (used, tests) in sorted(files.items(), key=lambda kv: -kv[1][0])[:25]:
            terminalreporter.write_line(f"{used:7.1f} s  {int(tests):4d} tests  {path}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, Result[pytest.TestReport], None]:
    outcome = yield
    report = outcome.get_result()
    if report.when != "call" or not report.passed:
        return
    mark = item.get_closest_marker("budget")
    if mark is not None:
        budget = float(mark.args[0])
    elif "integration/" in item.nodeid.split("::", 1)[0]:
        budget = _BUDGET_INTEGRATION
    else:
        budget = _BUDGET_UNIT
    if report.duration > 3 * budget:
        report.outcome = "failed"
        report.longrepr = (
            f"passed but took {report.duration:.1f} s, over 3x its {budget:g} s budget; "
            "make it faster or give it @pytest.mark.budget(seconds)"
        )


def pytest_sessionstart(session: pytest.Session) -> None:
    if not hasattr(session.config, "workerinput"):  # the controller (or a run without xdist)
        session.config.stash[_BEFORE] = _root_entries(session.config)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the run when it left new files in the checkout's root (a job whose output path
    was not given writes slurm-<id>.out into the cwd): the tests clean up after themselves."""
    before = session.config.stash.get(_BEFORE, None)
    if before is None:
        return
    left = sorted(_root_entries(session.config) - before)
    if left:
        session.config.stash[_LEFT] = left
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, config: pytest.Config
) -> None:
    """Name the files left (in the summary: under xdist the progress line is still open when
    the session finishes)."""
    left = config.stash.get(_LEFT, [])
    if left:
        shown = ", ".join(left[:10]) + (f" and {len(left) - 10} more" if len(left) > 10 else "")
        terminalreporter.write_line(f"FAILED: the run left files in the checkout's root: {shown}")


@pytest.fixture(autouse=True)
def isolated_home(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """Every test gets its own FEDHPC_HOME so no test reads the developer's config."""
    home = tmp_path_factory.mktemp("fedhpc-home")
    monkeypatch.setenv("FEDHPC_HOME", str(home))
    monkeypatch.delenv("FEDHPC_CONFIG", raising=False)
    return home


@pytest.fixture
def canary_dir(tmp_path: Path) -> Iterator[Path]:
    """A folder that must still hold no canary file when the test ends."""
    d = tmp_path / "canary"
    d.mkdir()
    yield d
    leaked = list(d.iterdir())
    assert not leaked, f"an injection string executed: {leaked}"


# Integration modules that touch no Slurm cluster (private process sites, an sshd of their own,
# or no sites at all): under `pytest -n` they run beside the Slurm tests, each module on one
# worker (its module fixtures start once). Every other integration module joins one of the two
# Slurm halves (SLURM_B), each run on one worker, a test at a time: a Slurm test may drain or
# fill the clusters. A new module is in a Slurm half until it is listed here.
PARALLEL_SAFE = frozenset(
    {
        "test_bridge_crash",
        "test_bridge_group",
        "test_bridge_late",
        "test_bridge_warm",
        "test_daemon_control",
        "test_deliveries_check",
        "test_demo_process",
        "test_e2e_claude",  # but SLURM_TESTS
        "test_e2e_codex",  # but SLURM_TESTS
        "test_e2e_unreached",
        "test_hostile_answers",
        "test_hostile_holes",
        "test_hostile_mcp",
        "test_input_surface",
        "test_jobscripts_mcp",  # but SLURM_TESTS
        "test_isolation_daemon",
        "test_many_sessions",
        "test_mcp_claude",
        "test_mcp_conformance",
        "test_mcp_conformance_auth",
        "test_mcp_conformance_relay",
        "test_mcp_contract",
        "test_mcp_fuzz",
        "test_mcp_http",  # but SLURM_TESTS
        "test_mcp_inspect_fields",
        "test_mcp_tasks",
        "test_mcp_wire",
        "test_move_data_wake",
        "test_offline_wait",
        "test_relay",
        "test_serve_preload",
        "test_service_facade",
        "test_service_oauth",
        "test_service_owners",
        "test_service_people",
        "test_site_lost",
        "test_skills_listing",
        "test_store_engines",
        "test_store_followers",
        "test_store_leader",
        "test_store_outage",
        "test_transport_ssh",
        "test_ui_failures",
        "test_ui_history",
        "test_ui_outlook",
        "test_ui_views",
    }
)


# Tests of parallel-safe modules that do use the Slurm federation (`devfed` mark): they join
# the Slurm scope, and the rest of their module (local-process sites) runs beside it.
SLURM_TESTS = frozenset(
    {
        "test_e2e_claude.py::test_claude_is_resumed_once_with_the_payload_and_reads_the_result",
        "test_e2e_codex.py::test_codex_is_resumed_once_with_the_payload_and_reads_the_result",
        "test_jobscripts_mcp.py::test_sbatch_scripts_run_on_slurm_with_what_was_not_carried_named",
        "test_jobscripts_mcp.py::test_scripts_refused_at_the_door_get_typed_errors",
        "test_mcp_http.py::test_loopback_http_serves_tools_without_a_token",
        "test_mcp_http.py::test_another_address_needs_the_bearer_token",
    }
)


# The Slurm tests run in two halves, "slurm-a" and "slurm-b", on two workers, each against a
# federation of its own (`fedhpc devfed up --instances 2`, docs/devfed.md): a worker's first
# half picks its instance (HALVES) and every process it starts inherits that instance's
# FEDHPC_DEVFED_DIR; a worker given both halves (`-n 1`) runs them on its one instance. These
# modules are "slurm-b", the rest (and SLURM_TESTS) "slurm-a": about half the Slurm time each
# (a whole `./dev test` on 3 workers, a loaded machine: 668 s and 470 s before test_bridge,
# test_daemon and test_ssh_loop, 102 s, moved here); rebalance when "time per scheduling
# scope" shows the two halves far apart.
SLURM_B = frozenset(
    {
        "test_bridge",
        "test_controller_loss",
        "test_crash",
        "test_daemon",
        "test_dead_site",
        "test_demo_slurm",
        "test_devfed_ssh",
        "test_etiquette_slurm",
        "test_examples",
        "test_hostile_daemon",
        "test_mcp_stdio",
        "test_orchestrator",
        "test_ssh_loop",
        "test_transfer_devfed",
    }
)
HALVES = {"slurm-a": 1, "slurm-b": 2}  # Slurm half -> the devfed instance its worker uses
_INSTANCE = pytest.StashKey[int]()


# Integration modules that use devpolaris (OpenPBS) alone, never a Slurm cluster (their daemons
# run with FEDHPC_DEVFED=pbs), beside the `test_pbs_*` ones: they join the "pbs" scope.
PBS_ONLY = frozenset({"test_arrays_pbs"})


def _scope(nodeid: str) -> str:
    """What runs together on one worker: each Slurm half (one scope, so one test at a time),
    each other integration module whole (its module fixtures start once), each unit test alone."""
    path = nodeid.split("::", 1)[0]
    if "integration/" not in path:
        return nodeid
    stem = Path(path).stem
    if stem.startswith("test_pbs_") or stem in PBS_ONLY:
        return "pbs"  # devpolaris (OpenPBS) only: one at a time, beside the Slurm tests
    test = f"{Path(path).name}::{nodeid.split('::', 1)[-1].split('[', 1)[0]}"
    if test in SLURM_TESTS:
        return "slurm-a"
    if stem in PARALLEL_SAFE:
        return path
    return "slurm-b" if stem in SLURM_B else "slurm-a"


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """On an xdist worker, the first Slurm test picks the worker's devfed instance (HALVES)
    before any fixture starts a daemon: FEDHPC_DEVFED_DIR names that instance's folder from
    then on, for this process and every process it starts (the `devfed` fixture takes that
    instance's lock). Without xdist nothing changes: instance 1, or what the caller set."""
    config = item.config
    if not hasattr(config, "workerinput") or _INSTANCE in config.stash:
        return
    number = HALVES.get(_scope(item.nodeid))
    if number is None:
        return
    config.stash[_INSTANCE] = number
    # Counted from the instance FEDHPC_DEVFED_DIR names (instance 1 unless set): a second
    # whole run can take instances 3 and 4.
    here = devfed_root()
    first = read_instance(here)
    os.environ[DEVFED_DIR.name] = str(
        instance_root(first.primary or here, first.number + number - 1)
    )


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under `pytest -n N`, tests are sent to workers by `_scope` (pytest-xdist's loadscope
    scheduling, with our scopes; its `xdist_group` marks do not survive pytest-asyncio's items)."""
    # only under xdist: a plain `pytest` run never imports it
    from xdist.scheduler import LoadScopeScheduling

    class Scopes(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return _scope(nodeid)

        def _assign_work_unit(self, node: Any) -> None:
            # A worker without a Slurm half takes the next one first: the halves, the suite's
            # long poles, start at once on workers of their own (with one worker it gets both).
            if not HALVES.keys() & self.assigned_work.get(node, {}).keys():
                half = next((s for s in self.workqueue if s in HALVES), None)
                if half is not None:
                    self.workqueue.move_to_end(half, last=False)
            super()._assign_work_unit(node)

    return Scopes(config, log)
