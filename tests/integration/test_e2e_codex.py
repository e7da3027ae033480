"""The real Codex CLI (npm @openai/codex) against a fake Responses API on loopback, with
`fedhpc serve` registered (`required = true`) and a real daemon on the local federation:

1. `codex exec --json` runs one turn: the fake model calls `submit_task` (the MCP server
   records the Codex thread from `_meta`) and ends the turn; the CLI exits;
2. the job runs on the local Slurm federation;
3. the bridge resumes the thread (`codex exec resume THREAD "<payload>" --json
   --skip-git-repo-check`, under a timeout) with the continuation payload;
4. the fake model sees the payload and calls `get_result`.

Checked as for Claude Code: no model turn between the submission and the resume, one resume
per event (also when the daemon is SIGKILLed while the delivery is `started`), the payload
once and under 600 B, no planted credential anywhere, nothing leaving loopback. The daemon is
started from a filtered environment (no model key): resumes work from `[resume.codex]` alone.
Also: jobs ending together (never "already has an active writer"; each event once, in order),
the model endpoint down then back (the model sees the event once), and an endpoint that never
answers (the try is stopped whole at the start timeout, whatever Codex printed meanwhile)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from fedhpc.bridge.group import group_members
from fedhpc.bridge.payload import SINGLE_CAP
from fedhpc.client.daemon_client import DaemonClient
from fedhpc.domain import ResourceEnvelope
from fedhpc.ops.continuations import ContinuationSpec, Runtime
from fedhpc.ops.tasks import SubmitTaskRequest
from fedhpc.settings.daemon import DaemonSettings
from tests.integration.agent_cli import (
    VENV_BIN,
    claude_env,
    claude_turn_argv,
    codex_calls,
    codex_config,
    codex_lines,
    codex_thread,
    resume_section,
    write_config,
)
from tests.integration.daemon_util import FAST, settled, start_from, stop
from tests.integration.fake_models import (
    CANARY_API_KEY,
    SUBMIT_ARGS,
    FakeOpenAI,
    canary_env,
    delivery_files,
    leaks,
    no_egress,
    result_json,
)
from tests.integration.mcp_support import serve_argv
from tests.integration.npm_tools import CODEX, npm_tool

APPROVED = ("submit_task", "cancel")  # the tools this agent calls that change anything
ENV = ResourceEnvelope.model_validate({"wall_time": {"min": "5m"}})
PROMPT = "Run `echo done` on the federation with fedhpc, then stop."


@pytest.fixture(scope="module")
def codex() -> Path:
    return npm_tool(*CODEX)


def _config(
    codex_home: Path,
    fedhome: Path,
    model_url: str,
    server_env: dict[str, str] | None = None,
    serve: list[str] | None = None,
) -> None:
    """Codex on the fake model with fedhpc's server (`serve`, default its absolute path);
    `codex exec` may call submit_task and cancel (approval policy never refuses every tool
    not read-only otherwise)."""
    env = {"FEDHPC_HOME": str(fedhome), **(server_env or {})}
    argv = serve or serve_argv()
    codex_config(codex_home, model_url, serve=argv, server_env=env, approve=APPROVED)


def _resume_config(
    fedhome: Path, codex: Path, env: dict[str, str], path: str = f"{VENV_BIN}:/usr/bin:/bin"
) -> None:
    """[resume.codex]: the binary and the whole environment of resumes (the key in an
    env_file); the daemon's own environment holds none of it."""
    secret = fedhome / "codex.env"
    secret.write_text(f"FAKE_OPENAI_API_KEY={CANARY_API_KEY}\n")
    secret.chmod(0o600)
    write_config(fedhome, resume_section("codex", codex, env, env_file=secret, path=path))


def _env(home: Path, fedhome: Path, extra: dict[str, str]) -> dict[str, str]:
    """What the first `codex exec` sees."""
    return {
        "PATH": f"{VENV_BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "HOME": str(home),
        "CODEX_HOME": str(home / ".codex"),
        "FAKE_OPENAI_API_KEY": CANARY_API_KEY,
        "FEDHPC_HOME": str(fedhome),
        **canary_env(),
        **extra,
    }


def _daemon_env(home: Path, fedhome: Path, bridge: dict[str, str]) -> dict[str, str]:
    """A daemon started from a filtered client environment (as Claude Code's hook or another
    client would): no model key, a short PATH. Resumes must work from the config alone."""
    return {
        "PATH": "/usr/bin:/bin",
        "HOME": str(home),
        "FEDHPC_BRIDGE_POLL_S": "0.3",
        "FEDHPC_RESUME_TIMEOUT_S": "90",
        **bridge,
    }


def _start(fedhome: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    return start_from(fedhome, env)


def _first_turn(codex: Path, project: Path, env: dict[str, str]) -> list[dict[str, Any]]:
    out = subprocess.run(
        [str(codex), "exec", "--json", "--skip-git-repo-check", PROMPT],
        cwd=project,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert out.returncode == 0, f"codex exited {out.returncode}: {out.stdout}\n{out.stderr}"
    return codex_lines(out.stdout)


async def _until(client: DaemonClient, state: str, n: int = 1, limit: float = 120) -> None:
    with anyio.fail_after(limit):
        while len([d for d in await client.deliveries() if d.state == state]) < n:
            await anyio.sleep(0.2)


@pytest.mark.devfed
@pytest.mark.parametrize("kill_mid_delivery", [False, True], ids=["clean", "daemon-killed"])
async def test_codex_is_resumed_once_with_the_payload_and_reads_the_result(
    codex: Path, devfed: Any, tmp_path: Path, kill_mid_delivery: bool
) -> None:
    home, project, fedhome = tmp_path / "home", tmp_path / "project", tmp_path / "fedhpc"
    for folder in (home, project, fedhome):
        folder.mkdir()
    with FakeOpenAI() as fake, no_egress() as (trap, watch):
        release = fake.hold_resume() if kill_mid_delivery else None
        _config(home / ".codex", fedhome, fake.url)
        guards = {**trap.env(), **watch.env()}
        env = _env(home, fedhome, guards)
        _resume_config(
            fedhome, codex, {"CODEX_HOME": str(home / ".codex"), **canary_env(), **guards}
        )
        daemon = _daemon_env(home, fedhome, {})
        proc = _start(fedhome, daemon)
        try:
            async with DaemonClient(DaemonSettings.from_env(home=fedhome)) as client:
                await client.wait_until_up(30)
                await client.refresh()
                # (1) submit, end the turn; the CLI exits
                lines = await anyio.to_thread.run_sync(_first_turn, codex, project, env)
                thread = codex_thread(lines)
                calls = codex_calls(lines)
                done = [(c["tool"], c["status"]) for c in calls]
                assert done == [("submit_task", "completed")], json.dumps(calls)
                assert fake.phases() == ["start", "after_submit"], fake.exchanges
                task_id = result_json(fake.exchanges[-1].tool_results[0])["task_id"]
                # (2) + (3) the job runs; the bridge resumes the thread
                if kill_mid_delivery:
                    assert release is not None
                    await _until(client, "started")
                    with anyio.fail_after(60):  # the resumed CLI is asking the model
                        while not fake.resume_seen.is_set():
                            await anyio.sleep(0.1)
                    stop(proc, kill=True)
                    proc = _start(fedhome, daemon)
                    await client.wait_until_up(30)
                    release.set()
                await _until(client, "delivered")
                deliveries = await settled(client, cycles=2)  # more cycles: still one resume
                events = await client.events(after=0, limit=1000)
        finally:
            stop(proc)
    # (4) the model saw the payload in the same thread and read the result
    assert fake.errors == []
    assert fake.phases() == ["start", "after_submit", "resume", "after_result"]
    assert fake.tool_calls() == ["submit_task", "get_result"]
    assert fake.status_calls_between_submit_and_resume() == []
    (resume,) = fake.resumes()
    assert resume.payload is not None
    assert resume.payload["task_id"] == task_id
    assert resume.payload["state"] == "completed"
    assert resume.arguments == {"task_id": task_id}
    if resume.session is not None:
        assert resume.session == thread
    result = result_json(fake.exchanges[-1].tool_results[0])
    assert result["task_id"] == task_id
    assert result["state"] == "completed"
    # the resumed process ran `codex exec resume` on the same thread and called get_result
    out = codex_lines(next((fedhome / "deliveries").glob("*/out")).read_text())
    assert codex_thread(out) == thread
    assert [c["tool"] for c in codex_calls(out)] == ["get_result"]
    # one delivery, one launch, the payload once and under the cap
    (d,) = deliveries
    assert (d.state, d.attempts) == ("delivered", 0)
    assert len(resume.prompt.encode()) <= SINGLE_CAP
    assert resume.prompt.count('"fedhpc":"continuation"') == 1
    assert len(list((fedhome / "deliveries").glob("*/prompt.txt"))) == 1
    # no credential anywhere the agent or the payloads can see
    texts = delivery_files(fedhome)
    texts["events"] = json.dumps(events)
    for i, ex in enumerate(fake.exchanges):
        texts[f"exchange {i} ({ex.phase})"] = "\n".join([ex.prompt, *ex.tool_results])
    assert leaks(texts) == []
    # nothing left loopback
    assert trap.hits == []
    assert watch.peers == set()
    assert watch.pids


@asynccontextmanager
async def _rig(
    codex: Path,
    tmp_path: Path,
    *,
    serve: list[str] | None = None,
    resume_path: str = f"{VENV_BIN}:/usr/bin:/bin",
    bridge: dict[str, str] | None = None,
) -> AsyncIterator[tuple[FakeOpenAI, Path, Path, dict[str, str], DaemonClient]]:
    """A daemon on the local-process sites (no Slurm), started from a filtered environment,
    resuming Codex from `[resume.codex]` only (`resume_path` its PATH), Codex's fedhpc
    server registered as `serve`."""
    home, project, fedhome = tmp_path / "home", tmp_path / "project", tmp_path / "fedhpc"
    for folder in (home, project, fedhome):
        folder.mkdir()
    with FakeOpenAI() as fake:
        _config(home / ".codex", fedhome, fake.url, serve=serve)
        env = _env(home, fedhome, {})
        _resume_config(fedhome, codex, {"CODEX_HOME": str(home / ".codex")}, resume_path)
        daemon = {
            **_daemon_env(home, fedhome, bridge or {}),
            "FEDHPC_DEVFED": "process",
            "FEDHPC_DEVFED_DIR": str(tmp_path / "devfed"),
        }
        proc = _start(fedhome, daemon)
        try:
            async with DaemonClient(DaemonSettings.from_env(home=fedhome)) as client:
                await client.wait_until_up(30)
                await client.refresh()
                yield fake, project, fedhome, env, client
        finally:
            stop(proc)


async def test_codex_jobs_ending_together_reach_the_model_once_each_in_order(
    codex: Path, tmp_path: Path
) -> None:
    """Two jobs of one thread ending within 0.2 s: never two `codex exec resume` at once (no
    "already has an active writer"), each event once, in event order."""
    async with _rig(codex, tmp_path) as (fake, project, fedhome, env, client):
        thread = codex_thread(await anyio.to_thread.run_sync(_first_turn, codex, project, env))
        await _until(client, "delivered")
        spec = ContinuationSpec(runtime=Runtime.CODEX, session_id=thread, cwd=str(project))
        end = time.time() + 8
        for i in range(2):
            at = int((end + 0.2 * i) * 1e9)
            body = f"while [ $(date +%s%N) -lt {at} ]; do sleep 0.02; done"
            await client.submit_task(
                SubmitTaskRequest(command=("bash", "-c", body), envelope=ENV, continuation=spec)
            )
        await _until(client, "delivered", 3, limit=180)
        rows = await settled(client, cycles=2)
    assert fake.errors == []
    assert all(d.state == "delivered" and d.attempts == 0 for d in rows)
    expected = sorted((d.id for d in rows), key=lambda i: int(i.split("-")[0][1:]))
    assert fake.seen_deliveries(thread) == expected
    errs = " ".join(p.read_text() for p in (fedhome / "deliveries").glob("*/err"))
    assert "active writer" not in errs


async def test_codex_model_endpoint_down_then_back_sees_the_event_once(
    codex: Path, tmp_path: Path
) -> None:
    bridge = {
        "FEDHPC_RESUME_START_TIMEOUT_S": "8",
        "FEDHPC_BRIDGE_BACKOFF_S": "1",
        "FEDHPC_BRIDGE_ATTEMPTS": "6",
    }
    async with _rig(codex, tmp_path, bridge=bridge) as (fake, project, _fedhome, env, client):
        fake.submit_args = {**SUBMIT_ARGS, "command": ["bash", "-c", "sleep 3; echo done"]}
        thread = codex_thread(await anyio.to_thread.run_sync(_first_turn, codex, project, env))
        fake.down = True
        with anyio.fail_after(150):  # two failed tries while the endpoint is down
            while not [d for d in await client.deliveries() if d.attempts >= 2]:
                await anyio.sleep(0.3)
        fake.down = False
        await _until(client, "delivered", limit=150)
        (d,) = await settled(client, cycles=2)
    assert fake.errors == []
    assert [e for e in fake.exchanges if e.phase == "down"]
    assert fake.seen_deliveries(thread) == [d.id]  # once, though it was sent before failing
    assert fake.phases(thread)[-2:] == ["resume", "after_result"]


async def test_a_daemon_started_by_codex_resumes_claude_code_too(
    codex: Path, tmp_path: Path
) -> None:
    """The daemon is auto-started by Codex's MCP server (Codex's filtered environment: no
    Anthropic anything); a Claude Code session then submits to the same daemon. Both are
    resumed, each from its own `[resume]` section."""
    from fedhpc.cli.daemon import stop_daemon
    from tests.integration.fake_models import FakeAnthropic
    from tests.integration.npm_tools import CLAUDE_CODE

    claude = npm_tool(*CLAUDE_CODE)
    home, project, fedhome = tmp_path / "home", tmp_path / "project", tmp_path / "fedhpc"
    for folder in (home, project, fedhome):
        folder.mkdir()
    daemon_env = {
        **FAST,
        "FEDHPC_DEVFED": "process",
        "FEDHPC_DEVFED_DIR": str(tmp_path / "df"),
        "FEDHPC_BRIDGE_POLL_S": "0.3",
    }
    cenv = claude_env(home)
    settings = DaemonSettings.from_env(home=fedhome)
    with FakeOpenAI() as oai, FakeAnthropic() as ant:
        _config(home / ".codex", fedhome, oai.url, daemon_env)
        secret = fedhome / "keys.env"
        secret.write_text(
            f"FAKE_OPENAI_API_KEY={CANARY_API_KEY}\nANTHROPIC_API_KEY={CANARY_API_KEY}\n"
        )
        write_config(
            fedhome,
            resume_section(
                "codex", codex, {"CODEX_HOME": str(home / ".codex")}, env_file=secret, path=None
            ),
            resume_section(
                "claude-code", claude, {"ANTHROPIC_BASE_URL": ant.url, **cenv}, env_file=secret
            ),
        )
        try:
            # (1) Codex's MCP server starts the daemon (nothing else has)
            lines_out = await anyio.to_thread.run_sync(
                _first_turn, codex, project, _env(home, fedhome, {})
            )
            thread = codex_thread(lines_out)
            assert settings.lock_path.exists()
            # (2) a Claude Code session, with the hook, submits to that daemon
            session = "5f0c4a58-3b1e-4b59-9d0e-6a3c2f1b7e11"
            env = {
                **os.environ,
                **cenv,
                "ANTHROPIC_BASE_URL": ant.url,
                "ANTHROPIC_API_KEY": CANARY_API_KEY,
                "FEDHPC_HOME": str(fedhome),
                "PATH": f"{VENV_BIN}:/usr/bin:/bin",
            }
            out = await anyio.to_thread.run_sync(
                lambda: subprocess.run(
                    claude_turn_argv(
                        claude,
                        PROMPT,
                        session,
                        serve=serve_argv(),
                        fedhome=fedhome,
                        hook="mcp__fedhpc__.*",
                    ),
                    cwd=project,
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=180,
                    stdin=subprocess.DEVNULL,
                    check=False,
                )
            )
            assert out.returncode == 0, out.stdout + out.stderr
            async with DaemonClient(settings) as client:
                await _until(client, "delivered", 2, limit=180)
                rows = await client.deliveries()
        finally:
            stop_daemon(settings)
    assert {d.session for d in rows} == {f"codex:{thread}", f"claude-code:{session}"}
    assert all(d.state == "delivered" and d.attempts == 0 for d in rows)
    assert [e.session for e in oai.resumes()] == [thread]
    assert [e.session for e in ant.resumes()] == [session]


async def test_codex_stuck_on_a_silent_endpoint_is_stopped_whole_and_sees_the_event_once(
    codex: Path, tmp_path: Path
) -> None:
    """The model endpoint takes the resume's request and never answers. Codex prints an
    `error` item first ("Model metadata for `fake-model` not found": a name it does not
    know), which is no model answer: the try is stopped at the start timeout, all of it
    (the CLI lives in the group fedhpc kills), and the retry is the only turn that
    continues once the endpoint answers again. Under load a retry can be stopped too (Codex
    and its MCP server slow to start), so the counts are of tries, not a fixed number."""
    bridge = {
        "FEDHPC_RESUME_START_TIMEOUT_S": "12",
        "FEDHPC_BRIDGE_BACKOFF_S": "1",
        "FEDHPC_BRIDGE_ATTEMPTS": "6",
    }
    async with _rig(codex, tmp_path, bridge=bridge) as (fake, project, fedhome, env, client):
        fake.submit_args = {**SUBMIT_ARGS, "command": ["bash", "-c", "sleep 3; echo done"]}
        release = fake.hold_resume()
        thread = codex_thread(await anyio.to_thread.run_sync(_first_turn, codex, project, env))
        # stopped at 12 s (+ the kill grace), not at FEDHPC_RESUME_TIMEOUT_S (90 s)
        with anyio.fail_after(60):
            while not (tried := [d for d in await client.deliveries() if d.attempts >= 1]):
                await anyio.sleep(0.3)
        first = min((fedhome / "deliveries").glob("*/pid"), key=lambda f: f.stat().st_mtime)
        assert group_members(int(first.read_text())) == []  # no process of it lives
        release.set()
        await _until(client, "delivered", limit=120)
        (d,) = await settled(client, cycles=2)  # no process of the first try lives (above)
        tries = list((fedhome / "deliveries").glob("*/pid"))
        assert all(group_members(int(f.read_text())) == [] for f in tries)  # none lives on
    assert "no answer from the model within 12 s" in (tried[0].last_error or "")
    assert "Model metadata for `fake-model` not found" in (tried[0].last_error or "")
    assert fake.errors == []
    assert d.state == "delivered" and d.attempts >= 1, d.last_error
    # each stopped try sent at most its one request, and the try that delivered sent one
    assert 2 <= len(fake.resumes()) <= d.attempts + 1
    assert [e.phase for e in fake.exchanges].count("after_result") == 1  # one turn went on
    assert fake.seen_deliveries(thread) == [d.id]


async def test_codex_resumes_start_fedhpc_by_name_whatever_the_resume_path_says(
    codex: Path, tmp_path: Path
) -> None:
    """Codex's server registered by name (`codex mcp add fedhpc -- fedhpc serve`, as the
    README says) and a `[resume.codex]` path without fedhpc's folder: every resume used to
    die ("required MCP servers failed to initialize: fedhpc: No such file or directory")
    while `fedhpc deliveries check` said ok. The resume's PATH now starts with the daemon's
    own fedhpc, and the check starts that very server under the resume environment."""
    async with _rig(codex, tmp_path, serve=["fedhpc", "serve"], resume_path="/usr/bin:/bin") as (
        fake,
        project,
        fedhome,
        env,
        client,
    ):
        thread = codex_thread(await anyio.to_thread.run_sync(_first_turn, codex, project, env))
        await _until(client, "delivered", limit=120)
        (d,) = await client.deliveries()
        check = subprocess.run(
            [f"{VENV_BIN}/fedhpc", "deliveries", "check", "--runtime", "codex", "--json"],
            env={
                "PATH": "/usr/bin:/bin",
                "HOME": str(tmp_path / "home"),
                "FEDHPC_HOME": str(fedhome),
            },
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
    assert (d.state, d.attempts) == ("delivered", 0), d.last_error
    assert fake.errors == []
    assert fake.phases(thread)[-2:] == ["resume", "after_result"]
    # the resume's server was the bridge's preloaded one (fedhpc/cli/preload.py)
    assert "serve handed over" in (fedhome / "serve-host.log").read_text()
    (report,) = json.loads(check.stdout)["runtimes"]
    assert check.returncode == 0 and report["ok"] is True, report
