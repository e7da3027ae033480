"""What the dashboard tests share (test_ui_dashboard.py, test_ui_failures.py): the system
Chromium for Playwright, `fedhpc demo --keep`'s daemon and dashboard (`keep_demo`), the federation
as Slurm reports it, and a pseudo-terminal to read the terminal pictures as a person's shell
shows them."""

from __future__ import annotations

import os
import pty
import re
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from fedhpc.client.daemon_client import DaemonClient
from fedhpc.profiles import load_profiles
from fedhpc.settings import REQUIRE_REAL, UPDATE_SCREENSHOTS
from fedhpc.settings.daemon import DaemonSettings
from fedhpc_dev.profiles import devfed_root
from tests.integration.daemon_util import drain
from tests.integration.test_demo_process import _demo_env

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
DOCS_IMG = Path(__file__).resolve().parents[2] / "docs" / "img"
SITES = ("devanvil", "devdelta", "devdeltaai", "devvista")


def need_browser() -> Any:
    """Playwright's sync API and the system Chromium; fail in CI (FEDHPC_REQUIRE_REAL) when
    either is missing, else skip."""
    problem = None
    try:
        from playwright.sync_api import expect, sync_playwright
    except ImportError:
        problem = "the Python package playwright is not installed (pip install -e '.[test]')"
    if problem is None and not CHROMIUM.exists():
        problem = f"no {CHROMIUM} (apt-get install chromium; ./dev test installs it)"
    if problem is not None:
        if REQUIRE_REAL.read() == "1":
            pytest.fail(problem)
        pytest.skip(problem)
    return sync_playwright, expect


class Troubles:
    """A page's console errors and warnings, page errors and failed requests, as it is used.

    A read still in flight when the test itself leaves the page (`goto` to another URL,
    `reload`) is cut by Chromium (`net::ERR_ABORTED`): that is the navigation, not a failure of
    the dashboard, and `leave` does such moves. Any other failed request counts, and so does an
    abort at any other time (the page never aborts its own reads)."""

    def __init__(self, page: Any) -> None:
        self.found: list[str] = []
        self.leaving = False
        page.on("console", self.console)
        page.on("pageerror", lambda e: self.found.append(f"page error: {e}"))
        page.on("requestfailed", self.request_failed)

    def console(self, m: Any) -> None:
        if m.type in ("error", "warning"):
            self.found.append(f"console.{m.type}: {m.text}")

    def request_failed(self, r: Any) -> None:
        if self.leaving and r.failure == "net::ERR_ABORTED":
            return
        self.found.append(f"request failed: {r.url} ({r.failure})")

    def leave(self, go: Callable[[], object]) -> None:
        """Navigate away with `go` (its requestfailed events arrive before it returns: the
        old document's reads are cut when the new one commits, before it loads)."""
        self.leaving = True
        try:
            go()
        finally:
            self.leaving = False


def gpus(devfed: Any, site: str) -> int:
    """The site's GPUs as its Slurm reports them (`sinfo`), in the partitions a job may use
    (the profile's blocked partitions, e.g. interactive ones, are not offered)."""
    blocked = set(load_profiles()[site].blocked_partitions)
    out = devfed.run(site, "sinfo", "-h", "-N", "-o", "%N %P %G")
    assert out.returncode == 0, out.stderr
    total = 0
    for line in out.stdout.splitlines():
        _node, partition, gres = line.split()
        found = re.match(r"gpu:[^:]+:(\d+)", gres)
        if found and partition.rstrip("*") not in blocked:
            total += int(found.group(1))
    return total


async def estimators(home: Path) -> list[dict[str, Any]]:
    """The daemon's wait estimators' recent errors, read from its REST API directly."""
    async with DaemonClient(DaemonSettings.from_env(home=home)) as client:
        rows: list[dict[str, Any]] = (await client.estimators())["estimators"]
        return rows


async def judged_jobs(home: Path) -> list[dict[str, Any]]:
    """The daemon's judged jobs (each one's realised wait and the estimators' predictions)."""
    async with DaemonClient(DaemonSettings.from_env(home=home)) as client:
        rows: list[dict[str, Any]] = (await client.estimators())["judged"]
        return rows


def shot(page: Any, out: Path, name: str) -> None:
    path = out / f"ui-{name}.png"
    page.screenshot(path=str(path), full_page=True)
    if UPDATE_SCREENSHOTS.read() == "1":
        DOCS_IMG.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, DOCS_IMG / path.name)


def stop(home: Path, ui_pid: int | None) -> None:
    env = {**os.environ, "FEDHPC_HOME": str(home)}
    subprocess.run(
        [sys.executable, "-m", "fedhpc.cli.main", "daemon", "stop"],
        env=env,
        capture_output=True,
        timeout=60,
        check=False,
    )
    if ui_pid is None:
        return
    deadline = time.monotonic() + 20  # it stops by itself once the daemon is gone
    while time.monotonic() < deadline and Path(f"/proc/{ui_pid}").exists():
        time.sleep(0.2)
    if Path(f"/proc/{ui_pid}").exists():
        os.kill(ui_pid, signal.SIGTERM)
        pytest.fail(f"the dashboard (pid {ui_pid}) did not stop with its daemon")


@dataclass(frozen=True)
class Kept:
    """`fedhpc demo --keep`'s daemon and dashboard, still running."""

    home: Path
    out: str
    url: str
    group_id: str
    env: dict[str, str]


def keep_demo(devfed: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kept]:
    """Run `fedhpc demo --keep` on the live Slurm federation (a 4-child group, one child
    re-placed, its agent resumed); yield its daemon and dashboard; stop both after."""
    drain(devfed)
    tmp = tmp_path_factory.mktemp("ui")
    env = _demo_env(tmp)
    env["FEDHPC_DEVFED_DIR"] = str(devfed_root())  # the live federation: this worker's
    home = tmp / "home"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "fedhpc.cli.main",
            "demo",
            "--sites",
            "slurm",
            "--keep",
            "--deadline",
            "180",
            "--home",
            str(home),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    saved = home / "ui.url"
    ui_pid = int(saved.read_text().splitlines()[1].split()[1]) if saved.exists() else None
    try:
        assert done.returncode == 0, done.stdout + done.stderr
        out = done.stdout
        found = re.search(r"^demo: dashboard: (http://127\.0\.0\.1:\d+/\?token=\S+)$", out, re.M)
        assert found, out
        group = re.search(r"agent: yield  group (\S+):", out)
        assert group, out
        yield Kept(home, out, found.group(1), group.group(1), {**env, "FEDHPC_HOME": str(home)})
    finally:
        stop(home, ui_pid)


# -- terminal pictures ----------------------------------------------------------------------------

SGR = re.compile(r"\x1b\[([0-9;]*)m")
# The red of failure, and the orange that reads as it, as `colours` names them.
RED = {"31", "91", "38;5;1", "38;5;9", "38;5;124", "38;5;160", "38;5;196", "38;5;202", "38;5;208"}


def colours(text: str) -> set[str]:
    """The colour parameters of every SGR sequence (bold, dim and resets are not colour)."""
    found = set()
    for params in SGR.findall(text):
        codes = [int(c) for c in params.split(";") if c]
        i = 0
        while i < len(codes):
            c = codes[i]
            if c in (38, 48):  # extended colour: 38;5;N or 38;2;R;G;B
                found.add(";".join(map(str, codes[i : i + (3 if codes[i + 1] == 5 else 5)])))
                i += 3 if codes[i + 1] == 5 else 5
                continue
            if 30 <= c <= 37 or 40 <= c <= 47 or 90 <= c <= 97 or 100 <= c <= 107:
                found.add(str(c))
            i += 1
    return found


def in_pty(
    argv: list[str],
    env: dict[str, str],
    *,
    interrupt_when: Callable[[str], bool] | None = None,
    limit: float = 60,
) -> tuple[int, str]:
    """Run `argv` with its stdout on a pseudo-terminal (as in a person's shell): status, text.
    With `interrupt_when`: Ctrl-C once it holds for the (plain) output so far, or after `limit`
    seconds (the caller's assertions then say what was missing)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        argv,
        stdout=slave,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        env={**env, "TERM": "xterm-256color", "COLUMNS": "200"},
    )
    os.close(slave)
    deadline = time.monotonic() + limit
    chunks: list[bytes] = []
    while True:
        if interrupt_when is not None:
            shown = unstyled(b"".join(chunks).decode(errors="replace"))
            if interrupt_when(shown) or time.monotonic() > deadline:
                proc.send_signal(signal.SIGINT)
                interrupt_when = None
        if time.monotonic() > deadline + 30 and proc.poll() is None:
            proc.kill()  # deaf to Ctrl-C: the exit code below says so
        if not select.select([master], [], [], 0.2)[0]:
            continue
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    code = proc.wait(timeout=60)
    assert proc.stderr is not None
    with proc.stderr:  # closed here, not left to the garbage collector (a ResourceWarning)
        err = proc.stderr.read().decode()
    assert code in (0, 130) or not err, err
    return code, b"".join(chunks).decode(errors="replace")


def timeline_rows(text: str) -> list[str]:
    """The timeline's attempt rows (not its notes): they start with a site's name."""
    return [ln for ln in text.splitlines() if ln.startswith(SITES) and re.search(r" #\d ", ln)]


def unstyled(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)
