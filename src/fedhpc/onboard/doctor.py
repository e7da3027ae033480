"""`fedhpc doctor`: one check list per site, each pass/fail with the fix. The I/O edge: every
check runs a command through the site's own transport, as fedhpc's work would."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import anyio

from fedhpc.adapters.command import Command
from fedhpc.adapters.site import open_adapter
from fedhpc.adapters.transports.base import TransportError
from fedhpc.adapters.transports.local import run_bounded
from fedhpc.adapters.transports.ssh import SshTransport
from fedhpc.domain.config import Site
from fedhpc.errors import FedError
from fedhpc.onboard.discover import discover_dialect
from fedhpc.onboard.doctor_slurm import check_associations, check_test_submits
from fedhpc.onboard.doctor_storage import probe_storage
from fedhpc.settings import fedhpc_home

__all__ = [
    "MAX_SKEW_S",
    "Check",
    "check_site",
    "connect_record",
    "master_expiry",
    "resume_checks",
]

Status = Literal["pass", "fail", "skip"]
MAX_SKEW_S = 60
_COMMANDS = {
    "slurm": ("sbatch", "squeue", "sacct", "scancel", "sinfo", "scontrol", "sacctmgr"),
    "pbs": ("qsub", "qstat", "qdel", "pbsnodes"),
    "lsf": ("bsub", "bjobs", "bkill", "bqueues", "bhosts", "lshosts"),
}


@dataclass(frozen=True, slots=True)
class Check:
    """One line of the doctor's list."""

    site: str
    name: str
    status: Status
    detail: str
    fix: str = ""

    def as_dict(self) -> dict[str, str]:
        return {
            "site": self.site,
            "check": self.name,
            "status": self.status,
            "detail": self.detail,
            "fix": self.fix,
        }


class _Run:
    """Collects the checks of one site."""

    def __init__(self, site: Site) -> None:
        self.site = site
        self.checks: list[Check] = []

    def add(self, name: str, ok: bool | None, detail: str, fix: str = "") -> None:
        status: Status = "skip" if ok is None else ("pass" if ok else "fail")
        self.checks.append(Check(self.site.name, name, status, detail, "" if ok else fix))


def connect_record(site: str) -> Path:
    """Where `fedhpc connect` notes the master it opened: its pid and when."""
    return fedhpc_home() / "connect" / f"{site}.json"


def master_expiry(pid: int, opened: dict[str, Any] | None, persist: str, now: float) -> str:
    """When the master closes (pure): one `fedhpc connect` opened (ControlPersist=yes) stays
    until the center ends the session; one fedhpc's calls opened on demand closes `persist`
    seconds after its last use."""
    if opened and opened.get("pid") == pid and isinstance(opened.get("at"), int | float):
        minutes = max(0.0, now - float(opened["at"])) / 60
        return (
            f"opened by fedhpc connect {minutes:.0f} min ago; stays open until the center "
            "ends the session (its login timeout)"
        )
    return f"opened on demand; closes {persist} s after its last use"


def _master_info(site: str, said: str, persist: str) -> str:
    found = re.search(r"pid=(\d+)", said)
    if not found:
        return f"closes {persist} s after its last use"
    try:
        opened = json.loads(connect_record(site).read_text())
    except (OSError, ValueError):
        opened = None
    return master_expiry(
        int(found.group(1)), opened if isinstance(opened, dict) else None, persist, time.time()
    )


async def _control_master(run: _Run, transport: SshTransport) -> bool:
    """An ssh site's ControlMaster: alive (and when it closes), or how to open it."""
    persist = run.site.transport.options.get("control_persist_s", "600")
    try:
        out = await run_bounded(
            transport.control_argv("check"), stdin=None, env=None, timeout_s=15.0
        )
    except TransportError as exc:
        out = None
        message = exc.message
    if out is not None and out.returncode == 0:
        said = (out.stderr or out.stdout).decode(errors="replace").strip() or "master running"
        run.add("control_master", True, f"{said}; {_master_info(run.site.name, said, persist)}")
        return True
    if out is not None:
        message = (out.stderr or out.stdout).decode(errors="replace").strip() or "no master"
    run.add(
        "control_master",
        False,
        f"no ControlMaster (never opened, or expired): {message[-200:]}",
        f"open it once (answers the MFA prompt): fedhpc connect {run.site.name}",
    )
    return False


def _reach_fix(site: Site, exc: FedError) -> str:
    """The fix for a site the doctor could not reach. A transient failure's own hint ("fedhpc
    retries this itself") is the daemon's, not a person's: over ssh, name what to check."""
    spec = site.transport
    if isinstance(exc, TransportError) and spec.kind == "ssh":
        return (
            f"check that `ssh {spec.host}` works in a terminal (host name, user, host key; the "
            f"host and user come from the profile and [sites.{site.name}] transport), then "
            f"`fedhpc connect {site.name}`"
        )
    return exc.hint or "see docs/transports.md"


async def _reachable(run: _Run, adapter: Any) -> bool:
    started = time.time()
    try:
        result = await adapter.transport.run(Command(("date", "+%s"), timeout_s=30.0))
    except FedError as exc:
        run.add("transport", False, exc.message, _reach_fix(run.site, exc))
        return False
    ended = time.time()
    if not result.ok or not result.stdout.strip().isdigit():
        run.add(
            "transport",
            False,
            f"`date` failed at the site: {result.stderr.strip()[-200:]}",
            "check the login shell and PATH at the site",
        )
        return False
    kind = run.site.transport.kind
    run.add("transport", True, f"{kind} transport ran a command in {ended - started:.1f} s")
    skew = int(result.stdout.strip()) - (started + ended) / 2
    ok = abs(skew) <= MAX_SKEW_S
    run.add(
        "clock",
        ok,
        f"site clock differs by {skew:+.0f} s",
        "the site's or this machine's clock is off: enable NTP (timedatectl set-ntp true) "
        "or tell the center; wait estimates and event times depend on it",
    )
    return True


async def _scheduler(run: _Run, adapter: Any, dialect: str) -> bool:
    if dialect not in _COMMANDS:
        run.add("scheduler", None, f"dialect {dialect}: fedhpc's own scheduler, no checks")
        return False
    names = _COMMANDS[dialect]
    script = 'for c in "$@"; do command -v "$c" >/dev/null 2>&1 || echo "$c"; done'
    missing = await adapter.transport.run(Command(("bash", "-c", script, "fedhpc", *names)))
    absent = missing.stdout.split()
    run.add(
        "commands",
        not absent,
        f"missing: {', '.join(absent)}" if absent else f"{', '.join(names)} on PATH",
        "load the scheduler's module in the login environment, or fix [transport] env PATH",
    )
    d = discover_dialect(dialect)
    try:
        problem = d.ping_problem(await adapter.transport.run(d.ping))
    except TransportError as exc:
        problem = exc.message
    env = run.site.transport.env
    where = f" (profile [transport] env: {env})" if env else ""
    run.add(
        "scheduler",
        problem is None,
        problem or "the controller answers",
        f"the scheduler does not answer{where}: check that it is up (status page / "
        "the center's support) and that its config is the one named",
    )
    return problem is None


async def _storage(run: _Run, adapter: Any) -> None:
    roots = [(s.name, s.path) for s in run.site.profile.storage]
    if run.site.user.workdir:
        roots.append(("workdir", run.site.user.workdir))
    if not roots:
        run.add("storage", None, "the profile names no storage root")
        return
    for check in await probe_storage(adapter.transport, run.site.name, roots):
        run.add(*check)


async def check_site(site: Site) -> list[Check]:
    """Every check for one site, in order; a check that cannot run after an earlier failure
    is skipped and says why."""
    run = _Run(site)
    adapter = open_adapter(site)
    try:
        # The first command opens a master where the login needs no person (keys); the
        # master's state after it says whether fedhpc's calls have a session to ride on.
        reached = await _reachable(run, adapter)
        if isinstance(adapter.transport, SshTransport):
            await _control_master(run, adapter.transport)
        if not reached:
            run.add("scheduler", None, "not checked: the transport failed")
            return run.checks
        dialect = site.profile.dialect
        if not await _scheduler(run, adapter, dialect):
            return run.checks
        if dialect == "slurm":
            await check_associations(run, adapter)
        await check_test_submits(run, adapter, dialect)
        await _storage(run, adapter)
    except FedError as exc:
        run.add("doctor", False, exc.message, exc.hint or "")
    finally:
        await adapter.transport.aclose()
    return run.checks


def resume_checks(home: Path, configured: tuple[str, ...]) -> list[Check]:
    """Each configured resume runtime can start (`fedhpc deliveries check`'s checks)."""
    # startup: the runtime check (~1 s of imports) only when the doctor checks the bridge
    from fedhpc.bridge.check import check_runtimes

    return [
        Check(
            "resume",
            f"runtime:{r['runtime']}",
            "pass" if r["ok"] else "fail",
            str(r["detail"]),
            "; ".join(r.get("fix") or []),
        )
        for r in check_runtimes(home, configured)
    ]


async def check_sites(
    sites: list[Site], report: Callable[[list[Check]], None] | None = None
) -> dict[str, list[Check]]:
    out: dict[str, list[Check]] = {}

    async def one(site: Site) -> None:
        out[site.name] = await check_site(site)
        if report:
            report(out[site.name])

    async with anyio.create_task_group() as tg:
        for site in sites:
            tg.start_soon(one, site)
    return {s.name: out[s.name] for s in sites}
