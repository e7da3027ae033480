"""CPU per test, when FEDHPC_TEST_CPU=1: each pytest process (an xdist worker, or the run
itself) moves into a cgroup of its own, so everything it starts afterwards is counted with it:
the daemons a test spawns (detached or not), the CLIs, the jobs of process sites, hypothesis in
the worker. Each report carries the CPU spent since the previous one (`cpu_s` in its
`user_properties`); the controller's ScopeTimes (tests/conftest.py) adds it per scope and
prints the tests that used the most. Shared services (slurmctld, slurmd, PostgreSQL started
before the run) are not counted.

Needs write access to a cgroup hierarchy (root): cgroup v1's `cpuacct` controller, else
cgroup v2's own group. Without one, the summary says so and the run goes on unmeasured."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Generator
from pathlib import Path

import pytest
from pluggy import Result

__all__ = ["CPU_KEY", "CpuGroup", "CpuPerTest"]

CPU_KEY = "cpu_s"
V1 = Path("/sys/fs/cgroup/cpuacct")


class CpuGroup:
    """A cgroup this process moved into, and the CPU seconds its members used since then."""

    def __init__(self, folder: Path, counter: str) -> None:
        self.folder, self.counter = folder, counter

    @classmethod
    def join(cls, name: str) -> CpuGroup | None:
        """A new group `name` holding this process (and what it starts from now on), or None
        when no hierarchy can be written."""
        for parent, counter in ((_own(V1, "cpuacct"), "cpuacct.usage"), (_v2_parent(), "cpu.stat")):
            if parent is None or not (parent / counter).exists():
                continue
            folder = parent / name
            try:
                folder.mkdir(exist_ok=True)
                (folder / "cgroup.procs").write_text(str(os.getpid()))
            except OSError:
                continue
            return cls(folder, counter)
        return None

    def seconds(self) -> float:
        text = (self.folder / self.counter).read_text()
        if self.counter == "cpuacct.usage":
            return int(text) / 1e9
        fields = dict(line.split() for line in text.splitlines())
        return int(fields["usage_usec"]) / 1e6

    def leave(self) -> None:
        """Back to the group it came from; the group is removed once nothing is left in it
        (a process it started that still runs keeps it, for the next run to find)."""
        with contextlib.suppress(OSError):
            (self.folder.parent / "cgroup.procs").write_text(str(os.getpid()))
            self.folder.rmdir()


def _own(mount: Path, controller: str) -> Path | None:
    """This process's group under `mount`, read from /proc/self/cgroup: the v1 line whose
    controllers include `controller`, or the v2 line (`controller` empty)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        number, names, path = line.split(":", 2)
        if controller in names.split(",") if controller else (number == "0" and not names):
            return mount / path.lstrip("/")
    return None


def _v2_parent() -> Path | None:
    """This process's own cgroup v2 folder, when cgroup2 is mounted where we look."""
    for mount in (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified")):
        if (mount / "cgroup.controllers").exists():
            return _own(mount, "")
    return None


class CpuPerTest:
    """The plugin: joins a group at configure, stamps each report with its CPU."""

    def __init__(self, config: pytest.Config) -> None:
        worker = getattr(config, "workerinput", {}).get("workerid", "main")
        self.group = CpuGroup.join(f"fedhpc-tests-{worker}-{os.getpid()}")
        self.mark = self.group.seconds() if self.group else 0.0

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, Result[pytest.TestReport], None]:
        outcome = yield
        if self.group is None:
            return
        now = self.group.seconds()
        outcome.get_result().user_properties.append((CPU_KEY, round(now - self.mark, 3)))
        self.mark = now

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self.group is not None:
            self.group.leave()
