"""`fedhpc relay` (issue 34): a person whose agent runs on their own machine is resumed there
when their work on a fedhpc service ends. A real service (a real OpenID provider, the HTTP MCP
endpoint, a daemon on the local process sites) and the real `fedhpc relay` command. The relay
is killed with SIGKILL while three jobs end; started again, it resumes the session once per
event: none lost, none twice. Its token never reaches its log."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from urllib.parse import urlencode

import anyio
import httpx2

from tests.integration.oidc_support import free_port, sign_in
from tests.integration.test_service_oauth import (  # noqa: F401 (the module's fixture)
    Service,
    _client,
    service,
)

SMALL = {"cpus": {"min": 1, "max": 1}, "wall_time": {"min": "5m"}}
# The resumed "agent": a program that appends what it was resumed with (the event's JSON on
# stdin) to a file, one line per resume.
AGENT = "import sys; open(sys.argv[1], 'a').write(sys.stdin.read().replace('\\n', ' ') + '\\n')"
TERMINAL = re.compile(r'"event":\s*"task\.terminal"[^}]*?"task_id":\s*"(t[0-9a-f]+)"')


def _relay(
    svc: Service, tmp: Path, token: Path | None, resumed: Path, *, port: int = 0
) -> subprocess.Popen[bytes]:
    """The relay, with `token` (a file), else signing in itself (its return on `port`)."""
    spec = {"runtime": "command", "command": [sys.executable, "-c", AGENT, str(resumed)]}
    log = (tmp / "relay.log").open("ab")
    env = {**os.environ, "FEDHPC_HOME": str(tmp / "laptop"), "BROWSER": "true"}
    argv = [sys.executable, "-m", "fedhpc.cli.main", "--log-level", "info", "relay"]
    argv += ["--service", svc.resource]
    if token is None:
        argv += ["--sign-in", "--callback-port", str(port)]
    else:
        argv += ["--token-file", str(token)]
    argv += ["--continuation", json.dumps(spec), "--wait-s", "2"]
    with log:
        return subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=log)


def _resumed(resumed: Path) -> Counter[str]:
    """task id -> how many resumes told of its end."""
    text = resumed.read_text() if resumed.exists() else ""
    return Counter(TERMINAL.findall(text))


async def test_a_relay_killed_while_three_jobs_end_resumes_each_once(
    service: Service,  # noqa: F811 (the fixture imported above)
    tmp_path: Path,
) -> None:
    secret = service.mint("alice", "fedhpc:read fedhpc:submit")
    token = tmp_path / "token"
    token.write_text(secret + "\n")
    token.chmod(0o600)
    resumed = tmp_path / "resumed.jsonl"
    relay = _relay(service, tmp_path, token, resumed)
    try:
        async with _client(service.resource, secret) as alice:
            ids = []
            for seconds in (1, 3, 5):  # ending one after the other
                args = {"command": ["sleep", str(seconds)], "envelope": SMALL}
                answer = await alice.call_tool("submit_task", args)
                assert not answer.is_error, answer.content
                ids.append(json.loads(answer.content[0].text)["task_id"])  # type: ignore[union-attr]
        with anyio.fail_after(120):
            while not _resumed(resumed):  # the first end resumed the session...
                await anyio.sleep(0.1)
        relay.send_signal(signal.SIGKILL)  # ...and the relay dies while the others end
        relay.wait()
        relay = _relay(service, tmp_path, token, resumed)
        with anyio.fail_after(120):
            while set(_resumed(resumed)) != set(ids):
                await anyio.sleep(0.2)
        # The resume is woken before the page is acknowledged and "relay mirrored" logged:
        # a stop in between would leave the log without it.
        with anyio.fail_after(30):
            while "relay mirrored" not in (tmp_path / "relay.log").read_text():
                await anyio.sleep(0.2)
        relay.send_signal(signal.SIGTERM)  # stopped, and started once more: nothing again
        assert relay.wait(timeout=30) == 0
        relay = _relay(service, tmp_path, token, resumed)
        await anyio.sleep(6)  # three long polls: what it would resume again, it would by now
    finally:
        relay.send_signal(signal.SIGTERM)
        relay.wait(timeout=30)
    assert _resumed(resumed) == Counter(dict.fromkeys(ids, 1)), resumed.read_text()
    log = (tmp_path / "relay.log").read_text()
    assert "relay mirrored" in log
    assert secret not in log and secret not in resumed.read_text()


async def test_an_expired_token_is_said_plainly_and_a_new_one_is_read_without_a_restart(
    service: Service,  # noqa: F811 (the fixture imported above)
    tmp_path: Path,
) -> None:
    """bob's tokens live 2 s (the test provider's): the relay says the service refused his
    token and where to write a new one, keeps trying, and follows his events once a fresh
    token is in the file; his work ran on meanwhile."""
    stale = service.mint("bob", "fedhpc:read fedhpc:submit")
    token = tmp_path / "token"
    token.write_text(stale)
    token.chmod(0o600)
    resumed = tmp_path / "resumed.jsonl"
    async with _client(service.resource, stale) as bob:
        answer = await bob.call_tool("submit_task", {"command": ["true"], "envelope": SMALL})
        task = json.loads(answer.content[0].text)["task_id"]  # type: ignore[union-attr]
    await anyio.sleep(3)  # expired
    relay = _relay(service, tmp_path, token, resumed)
    log = tmp_path / "relay.log"
    try:
        with anyio.fail_after(60):
            while "refused your token (HTTP 401)" not in (log.read_text() if log.exists() else ""):
                await anyio.sleep(0.2)
        assert str(token) in log.read_text()
        # A fresh one (a renewing helper's move): read at once, used before it expires (2 s).
        fresh = service.mint("bob", "fedhpc:read fedhpc:submit")
        token.write_text(fresh)
        with anyio.fail_after(60):
            while task not in _resumed(resumed):
                await anyio.sleep(0.2)
    finally:
        relay.send_signal(signal.SIGTERM)
        relay.wait(timeout=30)
    assert _resumed(resumed)[task] == 1
    assert stale not in log.read_text() and fresh not in log.read_text()


async def test_a_relay_signs_in_once_in_a_browser_and_keeps_its_tokens_private(
    service: Service,  # noqa: F811 (the fixture imported above)
    tmp_path: Path,
) -> None:
    """`--sign-in`: the SDK's OAuth client (discovery, registration, PKCE) against the service;
    the relay prints the URL, the browser's return reaches its loopback port, and its tokens
    are kept 0600. Started again, it signs in no more: the stored tokens serve."""
    port = free_port()
    resumed = tmp_path / "resumed.jsonl"
    log = tmp_path / "relay.log"
    relay = _relay(service, tmp_path, None, resumed, port=port)
    try:
        with anyio.fail_after(60):
            while "sign in to" not in (log.read_text() if log.exists() else ""):
                await anyio.sleep(0.1)
        url = log.read_text().split("sign in to", 1)[1].splitlines()[1].strip()
        redirect = f"http://127.0.0.1:{port}/callback"
        back = await sign_in(url, "gwen@lab.example", redirect)  # the person, in a browser
        async with httpx2.AsyncClient(timeout=30) as browser:
            page = await browser.get(f"{redirect}?{urlencode(back)}")
        assert page.status_code == 200 and "signed in" in page.text
        stored = tmp_path / "laptop" / "relay" / "oauth.json"
        with anyio.fail_after(60):
            while not stored.exists() or "access_token" not in stored.read_text():
                await anyio.sleep(0.1)
        assert stored.stat().st_mode & 0o777 == 0o600
        access = json.loads(stored.read_text())["tokens"]["access_token"]
        async with _client(service.resource, access) as gwen:
            answer = await gwen.call_tool("submit_task", {"command": ["true"], "envelope": SMALL})
            task = json.loads(answer.content[0].text)["task_id"]  # type: ignore[union-attr]
        with anyio.fail_after(60):
            while task not in _resumed(resumed):
                await anyio.sleep(0.2)
        relay.send_signal(signal.SIGTERM)
        assert relay.wait(timeout=30) == 0
        relay = _relay(service, tmp_path, None, resumed, port=port)
        await anyio.sleep(6)
        assert log.read_text().count("sign in to") == 1  # the stored tokens serve
    finally:
        relay.send_signal(signal.SIGTERM)
        relay.wait(timeout=30)
    assert _resumed(resumed)[task] == 1
    assert access not in log.read_text()


def test_a_token_file_others_may_read_is_refused(
    service: Service,  # noqa: F811 (the fixture imported above)
    tmp_path: Path,
) -> None:
    token = tmp_path / "token"
    token.write_text("not-a-real-token\n")
    token.chmod(0o644)
    spec = json.dumps({"runtime": "inbox", "inbox": "me"})
    out = subprocess.run(
        [
            *(sys.executable, "-m", "fedhpc.cli.main", "relay", "--service", service.resource),
            *("--token-file", str(token), "--continuation", spec),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode != 0
    assert "may be read by others" in out.stderr and "chmod 600" in out.stderr
    assert "not-a-real-token" not in out.stderr
