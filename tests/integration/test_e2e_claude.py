"""The real Claude Code CLI (npm @anthropic-ai/claude-code) against a fake Messages API on
loopback, with `fedhpc serve` registered and a real daemon on the local federation:

1. the fake model calls `submit_task` and ends the turn; the CLI exits;
2. the job runs on the local Slurm federation;
3. the bridge resumes the same session (`claude -p --resume`, in the session's cwd, the id
   learned from the SessionStart hook) with the continuation payload;
4. the fake model sees the payload and calls `get_result`.

Checked: no model turn at all between the submission and the resume, one resume per event
(also when the daemon is SIGKILLed while the delivery is `started`), the payload under 2 KB,
no planted credential in any payload, event or tool result, nothing leaving loopback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import anyio
import pytest

from fedhpc.client import DaemonClient
from fedhpc.daemon.settings import DaemonSettings
from tests.integration.daemon_util import start, stop
from tests.integration.fake_models import (
    CANARY_API_KEY,
    FakeAnthropic,
    canary_env,
    delivery_files,
    leaks,
    no_egress,
    result_json,
)
from tests.integration.mcp_support import serve_argv
from tests.integration.npm_tools import CLAUDE_CODE, npm_tool

pytestmark = pytest.mark.devfed

VENV_BIN = str(Path(sys.executable).parent)
PROMPT = "Run `echo done` on the federation with fedhpc, then stop."


@pytest.fixture(scope="module")
def claude() -> Path:
    return npm_tool(*CLAUDE_CODE)


def _env(claude: Path, home: Path, fedhome: Path, fake: FakeAnthropic, extra: dict[str, str]
         ) -> dict[str, str]:  # fmt: skip
    """What both the first `claude` and the daemon (hence the resumed `claude`) see."""
    return {
        "PATH": f"{VENV_BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "HOME": str(home),
        "CLAUDE_CONFIG_DIR": str(home / ".claude"),
        "ANTHROPIC_BASE_URL": fake.url,
        "ANTHROPIC_API_KEY": CANARY_API_KEY,
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "FEDHPC_HOME": str(fedhome),
        "FEDHPC_CLAUDE_BIN": str(claude),
        "FEDHPC_RESUME_TIMEOUT_S": "90",
        "FEDHPC_BRIDGE_POLL_S": "0.5",
        **canary_env(),
        **extra,
    }


def _first_turn(claude: Path, project: Path, fedhome: Path, session: str,
                env: dict[str, str]) -> dict[str, Any]:  # fmt: skip
    argv = serve_argv()
    mcp = {"mcpServers": {"fedhpc": {"type": "stdio", "command": argv[0], "args": argv[1:],
                                     "env": {"FEDHPC_HOME": str(fedhome)}}}}  # fmt: skip
    hook = f"{VENV_BIN}/fedhpc hook session-start"
    settings = {"hooks": {"SessionStart": [{"hooks": [{"type": "command", "command": hook}]}]}}
    out = subprocess.run(
        [str(claude), "-p", PROMPT, "--output-format", "json", "--session-id", session,
         "--mcp-config", json.dumps(mcp), "--strict-mcp-config", "--allowedTools", "mcp__fedhpc",
         "--settings", json.dumps(settings)],
        cwd=project, env={**os.environ, **env}, capture_output=True, text=True, timeout=120,
        check=False,
    )  # fmt: skip
    assert out.returncode == 0, f"claude exited {out.returncode}: {out.stdout}\n{out.stderr}"
    answer: dict[str, Any] = json.loads(out.stdout)
    assert not answer.get("is_error"), answer
    assert answer.get("permission_denials") == [], answer
    return answer


async def _until(client: DaemonClient, state: str, limit: float = 90) -> None:
    with anyio.fail_after(limit):
        while not [d for d in await client.deliveries() if d.state == state]:
            await anyio.sleep(0.2)


@pytest.mark.parametrize("kill_mid_delivery", [False, True], ids=["clean", "daemon-killed"])
async def test_claude_is_resumed_once_with_the_payload_and_reads_the_result(
    claude: Path, devfed: Any, tmp_path: Path, kill_mid_delivery: bool
) -> None:
    home, project, fedhome = tmp_path / "home", tmp_path / "project", tmp_path / "fedhpc"
    for folder in (home, project):
        folder.mkdir()
    session = str(uuid.uuid4())
    with FakeAnthropic() as fake, no_egress() as (trap, watch):
        release = fake.hold_resume() if kill_mid_delivery else None
        env = _env(claude, home, fedhome, fake, {**trap.env(), **watch.env()})
        proc = start(fedhome, **env)
        try:
            async with DaemonClient(DaemonSettings.from_env(home=fedhome)) as client:
                await client.wait_until_up(30)
                await client.refresh()
                # (1) submit, end the turn; the CLI exits
                answer = await anyio.to_thread.run_sync(
                    _first_turn, claude, project, fedhome, session, env
                )
                assert answer["session_id"] == session
                assert fake.phases() == ["start", "after_submit"], fake.exchanges
                submitted = result_json(fake.exchanges[-1].tool_results[0])
                task_id = submitted["task_id"]
                # (2) + (3) the job runs; the bridge resumes the session
                if kill_mid_delivery:
                    assert release is not None
                    await _until(client, "started")
                    with anyio.fail_after(60):  # the resumed CLI is asking the model
                        while not fake.resume_seen.is_set():
                            await anyio.sleep(0.1)
                    stop(proc, kill=True)
                    proc = start(fedhome, **env)
                    await client.wait_until_up(30)
                    release.set()
                await _until(client, "delivered")
                await anyio.sleep(3)  # more bridge cycles: still one resume
                deliveries = await client.deliveries()
                events = await client.events(after=0, limit=1000)
        finally:
            stop(proc)
    # (4) the model saw the payload in the same session and read the result
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
        assert resume.session == session
    result = result_json(fake.exchanges[-1].tool_results[0])
    assert result["task_id"] == task_id
    assert result["state"] == "completed"
    # one delivery, one launch, payload under the cap
    (d,) = deliveries
    assert (d.state, d.attempts) == ("delivered", 0)
    assert d.payload_bytes < 2048
    payloads = sorted((fedhome / "deliveries").glob("*/payload.json"))
    assert len(payloads) == 1
    assert len(payloads[0].read_bytes()) < 2048
    # no credential anywhere the agent or the payloads can see
    texts = delivery_files(fedhome)
    texts["events"] = json.dumps(events)
    for i, ex in enumerate(fake.exchanges):
        texts[f"exchange {i} ({ex.phase})"] = "\n".join([ex.prompt, *ex.tool_results])
    assert leaks(texts) == []
    # nothing left loopback
    assert trap.hits == []
    assert watch.peers == set()
    assert watch.pids  # the sampler did see the CLIs
