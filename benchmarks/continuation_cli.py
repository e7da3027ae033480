"""Continuation latency with the real agent CLIs: a job's own end -> the resumed turn's first
model request. Used by `continuation.py --cli claude|codex`.

The real Claude Code / Codex CLI (the pinned npm versions, cached like the tests) runs offline
against the fake model servers of the E2E tests. One first turn creates the session (Claude:
with fedhpc's PreToolUse hook; Codex: the thread from `_meta`) and submits a job through the
MCP server; then jobs bound to that session are run one after another (each waits for the
previous resume, so no coalescing blurs a figure). For each job:

    latency = the fake model's arrival time of the resumed turn's first request
              - the clock the job wrote as its last instruction

split into job end -> resume launch (detection + bridge: the resume folder's `pid` file) and
launch -> first model request (the CLI's start, fedhpc's MCP server loaded with `alwaysLoad`,
the resumed transcript read). A bare `claude -p` / `codex exec` (no MCP server, no hooks)
from the same environment gives the CLI's own start-up, so the difference is what fedhpc adds.
"""

from __future__ import annotations

import fcntl
import math
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.integration.agent_cli import (  # noqa: E402
    claude_env,
    claude_turn_argv,
    codex_config,
    codex_lines,
    codex_thread,
    resume_section,
    write_config,
)
from tests.integration.conftest import LOCK  # noqa: E402
from tests.integration.fake_models import FakeAnthropic, FakeModel, FakeOpenAI  # noqa: E402
from tests.integration.npm_tools import CLAUDE_CODE, CODEX, npm_tool  # noqa: E402

from fedhpc.client.daemon_client import DaemonClient  # noqa: E402
from fedhpc.ops.continuations import ContinuationSpec, Runtime  # noqa: E402
from fedhpc.ops.tasks import SubmitTaskRequest  # noqa: E402
from fedhpc.settings.daemon import DaemonSettings  # noqa: E402

__all__ = ["run_cli"]

BIN = str(Path(sys.executable).parent)
KEY = "sk-fake-bench"
ENVELOPE = {"cpus": {"min": 1, "max": 1}, "wall_time": {"min": "5m", "max": "5m"}}


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def _claude_setup(home: Path, fedhome: Path, fake: FakeModel) -> tuple[dict[str, str], str]:
    env = {**claude_env(home), "ANTHROPIC_BASE_URL": fake.url, "ANTHROPIC_API_KEY": KEY}
    exe = str(npm_tool(*CLAUDE_CODE))
    write_config(fedhome, resume_section("claude-code", exe, env, path=f"{BIN}:/usr/bin:/bin"))
    return env, exe


def _codex_setup(home: Path, fedhome: Path, fake: FakeModel) -> tuple[dict[str, str], str]:
    codex_home = home / ".codex"
    codex_home.mkdir(parents=True)
    server_env = {"FEDHPC_HOME": str(fedhome)}
    codex_config(codex_home, fake.url, serve=[f"{BIN}/fedhpc", "serve"], server_env=server_env)
    env = {"HOME": str(home), "CODEX_HOME": str(codex_home), "FAKE_OPENAI_API_KEY": KEY}
    exe = str(npm_tool(*CODEX))
    write_config(fedhome, resume_section("codex", exe, env, path=f"{BIN}:/usr/bin:/bin"))
    return env, exe


def _first_turn(cli: str, exe: str, project: Path, fedhome: Path, env: dict[str, str]) -> str:
    """Create the session with one real turn that submits through fedhpc; its id."""
    full = {**os.environ, **env, "PATH": f"{BIN}:/usr/bin:/bin", "FEDHPC_HOME": str(fedhome)}
    prompt = "Run `echo done` on the federation with fedhpc, then stop."
    if cli == "claude":
        session = str(uuid.uuid4())
        serve = [f"{BIN}/fedhpc", "serve"]
        argv = claude_turn_argv(exe, prompt, session, serve=serve, fedhome=fedhome)
    else:
        argv = [exe, "exec", "--json", "--skip-git-repo-check", prompt]
    out = subprocess.run(
        argv,
        cwd=project,
        env=full,
        capture_output=True,
        text=True,
        timeout=180,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    if out.returncode != 0:
        raise SystemExit(f"{cli} first turn failed: {out.stdout[-500:]} {out.stderr[-500:]}")
    if cli == "claude":
        return session
    return codex_thread(codex_lines(out.stdout))


def _bare_startup(cli: str, exe: str, project: Path, env: dict[str, str], fake: FakeModel) -> float:
    """Median start -> first model request of the CLI alone (no MCP server, no hooks)."""
    full = {**os.environ, **env, "PATH": "/usr/bin:/bin"}
    if cli == "codex":
        bare = Path(env["CODEX_HOME"]).parent / ".codex-bare"
        bare.mkdir(exist_ok=True)
        text = (Path(env["CODEX_HOME"]) / "config.toml").read_text()
        (bare / "config.toml").write_text(text.split("[mcp_servers.fedhpc]")[0])
        full["CODEX_HOME"] = str(bare)
    times = []
    for _ in range(5):
        before = len(fake.exchanges)
        t0 = time.time()
        if cli == "claude":
            argv = [exe, "-p", "hello", "--output-format", "json", "--strict-mcp-config"]
        else:  # a CODEX_HOME without fedhpc's server (a `-c` override does not remove it)
            argv = [exe, "exec", "--json", "--skip-git-repo-check", "hello"]
        subprocess.run(
            argv,
            cwd=project,
            env=full,
            capture_output=True,
            timeout=120,
            stdin=subprocess.DEVNULL,
            check=False,
        )
        first = [e.at for e in fake.exchanges[before:]]
        if first:
            times.append(min(first) - t0)
    return statistics.median(times) if times else float("nan")


async def run_cli(cli: str, jobs: int, cycle: float, home: Path, sites: str) -> dict[str, Any]:
    """Measure `jobs` resumes of one real CLI session on `sites` (slurm | process). On Slurm
    it holds the integration tests' federation lock: their drains would cancel its jobs."""
    if sites != "slurm":
        return await _run_cli(cli, jobs, cycle, home, sites)
    with LOCK.open("a") as lock:
        await anyio.to_thread.run_sync(fcntl.flock, lock, fcntl.LOCK_EX)
        return await _run_cli(cli, jobs, cycle, home, sites)


async def _run_cli(cli: str, jobs: int, cycle: float, home: Path, sites: str) -> dict[str, Any]:
    user, project, fedhome = home / "user", home / "project", home / "fedhpc"
    for folder in (user, project, fedhome):
        folder.mkdir(parents=True)
    fake: FakeModel = FakeAnthropic() if cli == "claude" else FakeOpenAI()
    with fake:
        setup = _claude_setup if cli == "claude" else _codex_setup
        env, exe = setup(user, fedhome, fake)
        process = {"FEDHPC_DEVFED": "process", "FEDHPC_DEVFED_DIR": str(home / "devfed")}
        local = {"FEDHPC_DEVFED": "1"} if sites == "slurm" else process
        denv = {
            "PATH": "/usr/bin:/bin",
            "HOME": str(user),
            "FEDHPC_HOME": str(fedhome),
            "FEDHPC_CYCLE_S": str(cycle),
            "FEDHPC_REFRESH_S": "5",
            "FEDHPC_LOG_LEVEL": "warning",
            **local,
        }
        log = (home / "daemon.log").open("wb")
        proc = subprocess.Popen(  # noqa: ASYNC220 (a detached daemon, waited for at the end)
            [sys.executable, "-m", "fedhpc.cli.main", "daemon"],
            env=denv,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
        log.close()
        rows: list[dict[str, float]] = []
        try:
            async with DaemonClient(DaemonSettings.from_env(home=fedhome)) as client:
                await client.wait_until_up(30)
                await client.refresh()
                session = await anyio.to_thread.run_sync(
                    _first_turn, cli, exe, project, fedhome, env
                )
                await _settled(client, 1)
                runtime = Runtime.CLAUDE_CODE if cli == "claude" else Runtime.CODEX
                spec = ContinuationSpec(runtime=runtime, session_id=session, cwd=str(project))
                ends = home / "ends"
                ends.mkdir()
                for i in range(jobs):
                    stamp = ends / str(i)
                    work = f"sleep {i % 3}.{i * 37 % 10}; date +%s.%N > {stamp}"
                    before = len(fake.exchanges)
                    await client.submit_task(
                        SubmitTaskRequest.model_validate(
                            {
                                "command": ["bash", "-c", work],
                                "envelope": ENVELOPE,
                                "name": f"bench-cli-{i}",
                                "continuation": spec.model_dump(),
                            }
                        )
                    )
                    await _settled(client, i + 2)
                    first = min(e.at for e in fake.exchanges[before:] if e.phase == "resume")
                    launched = max(
                        (f / "pid").stat().st_mtime
                        for f in (fedhome / "deliveries").iterdir()
                        if (f / "pid").exists()
                    )
                    ended = float(stamp.read_text())
                    rows.append(
                        {
                            "latency_s": first - ended,
                            "detect_bridge_s": launched - ended,
                            "cli_start_s": first - launched,
                        }
                    )
                deliveries = await client.deliveries()
            bare = await anyio.to_thread.run_sync(_bare_startup, cli, exe, project, env, fake)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    lat = [r["latency_s"] for r in rows]
    starts = [r["cli_start_s"] for r in rows]
    return {
        "cli": cli,
        "sites": sites,
        "jobs": jobs,
        "control_interval_s": cycle,
        "median_s": statistics.median(lat),
        "p95_s": _pct(lat, 0.95),
        "detect_bridge_median_s": statistics.median(r["detect_bridge_s"] for r in rows),
        "cli_start_median_s": statistics.median(starts),
        "cli_start_p95_s": _pct(starts, 0.95),
        "bare_cli_start_s": bare,
        "fedhpc_adds_s": statistics.median(starts) - bare,
        "target_s": cycle + 1.5 if cli == "codex" else None,
        "delivered_once": all(d.state == "delivered" and d.attempts == 0 for d in deliveries),
        "tools_verified": all(d.tools_verified is not False for d in deliveries),
        "rows": rows,
    }


async def _settled(client: DaemonClient, n: int, limit: float = 180) -> None:
    with anyio.fail_after(limit):
        while True:
            rows = await client.deliveries()
            if len(rows) >= n and all(d.state == "delivered" for d in rows):
                return
            if any(d.state == "dead" for d in rows):
                raise SystemExit(f"a delivery died: {[d.last_error for d in rows]}")
            await anyio.sleep(0.1)
