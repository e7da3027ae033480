"""`fedhpc service` for a team (issue 34): the command runs the daemon and the OAuth-protected
HTTP MCP endpoint from one config, against a real OpenID provider, on private process sites.
Two people, each through 4 MCP sessions (the SDK's own HTTP client), with tasks, a group and
transfers: neither can read, list, cancel, replan, stage in, subscribe to or see the events of
the other's work through any tool, resource or daemon REST route; an admin reads both; each
job names the person it ran for; and no token value (a canary and every token minted) appears
in any log, event, stored row, answer or dashboard response."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp.types import (
    CallToolResult,
    SubscriptionFilter,
    SubscriptionsAcknowledgedNotification,
    SubscriptionsListenRequest,
    SubscriptionsListenRequestParams,
    SubscriptionsListenResult,
)

from fedhpc.client.daemon_client import DaemonClient
from fedhpc.client.wire import ACTING_FOR
from fedhpc.errors import FedError
from fedhpc.ops.continuations import ContinuationSpec
from fedhpc.ops.data import TransferRequest
from fedhpc.ops.tasks import CancelRequest, ReplanRequest, ResultRequest, SubmitTaskRequest
from fedhpc.settings.daemon import DaemonSettings
from fedhpc.transfer.records import stage_out_id
from tests.integration.daemon_util import FAST, stop
from tests.integration.oidc_support import Provider, free_port, oidc_provider, service_config

FEDHPC = [sys.executable, "-m", "fedhpc.cli.main"]
CANARY = "canary-token-" + "Zq7wX" * 10
SMALL = {"cpus": {"min": 1, "max": 1}, "wall_time": {"min": "5m"}}
LONG = {"command": ["sleep", "600"], "envelope": SMALL}
EVERYDAY = "fedhpc:read fedhpc:submit fedhpc:data"
WAKE = ContinuationSpec.model_validate({"runtime": "command", "command": ["true"]})


@dataclass
class Team:
    provider: Provider
    resource: str
    home: Path
    env: dict[str, str]
    storage: Path
    log: Path
    tokens: list[str] = field(default_factory=list)
    answers: list[str] = field(default_factory=list)  # every answer a test received

    def mint(self, person: str, scope: str = EVERYDAY) -> str:
        token = self.provider.mint(person, scope, self.resource)
        self.tokens.append(token)
        return token

    def owner(self, person: str) -> str:
        return f"{self.provider.issuer}|{person}"


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Team]:
    base = tmp_path_factory.mktemp("team")
    home, devfed = base / "home", base / "devfed"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("FEDHPC_")},
        **FAST,
        "FEDHPC_HOME": str(home),
        "FEDHPC_DEVFED": "process",
        "FEDHPC_DEVFED_DIR": str(devfed),
        "FEDHPC_LOG_LEVEL": "info",
    }
    with oidc_provider(base / "provider.log") as provider:
        port = free_port()
        resource = f"http://127.0.0.1:{port}/mcp"
        config = service_config(base, provider, resource, extra=f'bind = "127.0.0.1:{port}"\n')
        check = subprocess.run(
            [*FEDHPC, "service", "--config", str(config), "--check", "--json"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert check.returncode == 0, check.stderr
        summary = json.loads(check.stdout)
        assert (summary["resource"], summary["ok"]) == (resource, True)
        assert summary["sites"] and all(s["problem"] is None for s in summary["sites"])
        log = base / "service.log"
        with log.open("wb") as err:
            proc = subprocess.Popen(
                [*FEDHPC, "service", "--config", str(config)],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=err,
            )
        try:
            _wait_listening(proc, resource, log)
            yield Team(provider, resource, home, env, devfed, log)
        finally:
            stop(proc)
    # `fedhpc service` stopped its daemon with itself: nothing holds the home any more.
    assert "the daemon exited" not in log.read_text(errors="replace")


def _wait_listening(proc: subprocess.Popen[bytes], resource: str, log: Path) -> None:
    meta = resource.replace("/mcp", "/.well-known/oauth-protected-resource/mcp")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"fedhpc service exited {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            if httpx2.get(meta).status_code == 200:
                return
        except httpx2.TransportError:
            pass
        time.sleep(0.2)
    pytest.fail("fedhpc service did not start listening")


@asynccontextmanager
async def _client(url: str, token: str) -> AsyncIterator[Client]:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=120)
    async with http, Client(streamable_http_client(url, http_client=http), mode="legacy") as c:
        yield c


class Person:
    """One person's MCP sessions; every answer is kept for the canary scan."""

    def __init__(self, team: Team, name: str, sessions: list[Client]) -> None:
        self.team, self.name, self.sessions = team, name, sessions

    async def call(self, i: int, tool: str, args: dict[str, Any]) -> CallToolResult:
        result = await self.sessions[i].call_tool(tool, args)
        self.team.answers.append(result.model_dump_json())
        return result

    async def ok(self, i: int, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        result = await self.call(i, tool, args)
        assert not result.is_error, (self.name, tool, result.content)
        body: dict[str, Any] = json.loads(result.content[0].text)  # type: ignore[union-attr]
        return body

    async def not_found(self, i: int, tool: str, args: dict[str, Any]) -> None:
        result = await self.call(i, tool, args)
        assert result.is_error, (self.name, i, tool, args, result.content)
        body = json.loads(result.content[0].text)  # type: ignore[union-attr]
        assert body["code"] == "not_found", (self.name, i, tool, body)
        assert "forbidden" not in json.dumps(body).lower()

    async def unreadable(self, i: int, uri: str) -> None:
        with pytest.raises(MCPError) as err:
            await self.sessions[i].read_resource(uri)
        self.team.answers.append(repr(err.value.error))
        assert isinstance(err.value.error.data, dict)
        assert err.value.error.data["code"] == "not_found", (self.name, uri, err.value.error)

    async def events(self, i: int) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        after = 0
        while True:
            page = await self.ok(i, "list_events", {"after": after, "limit": 200})
            out.extend(page["events"])
            after = page["next_after"]
            if not page["more"]:
                return out


async def _until(what: str, check: Any, limit: float = 240) -> Any:
    with anyio.fail_after(limit):
        while True:
            found = await check()
            if found:
                return found
            await anyio.sleep(0.5)


@dataclass
class Work:
    long: str
    quick: str
    group: str
    children: set[str]
    transfer: str
    gate: str  # a task that ends when its go file appears
    go: Path
    wake: str = ""  # the continuation registered on `gate` through the REST route

    @property
    def ids(self) -> set[str]:
        return {self.long, self.quick, self.group, self.transfer, self.gate, *self.children}


async def _submit(p: Person, storage: Path) -> Work:
    """Work from all four sessions: a long task, a quick one that prints whom it ran for, a
    group, a copy between two sites (the same arguments for both people) and a task that
    waits for its go file."""
    for site in ("devdelta", "devanvil"):
        (storage / site / "storage").mkdir(parents=True, exist_ok=True)
    # A Codex client names its thread: the service, on another machine, never resumes it.
    codex = {"threadId": "019a0000-0000-7000-8000-00000000c0de"}
    answer = await p.sessions[0].call_tool("submit_task", LONG, meta=codex)  # type: ignore[arg-type]
    p.team.answers.append(answer.model_dump_json())
    assert not answer.is_error, answer.content
    submitted = json.loads(answer.content[0].text)  # type: ignore[union-attr]
    assert "shared fedhpc service" in submitted["next"], submitted
    long = submitted["task_id"]
    quick_args = {
        "command": ["sh", "-c", 'echo "ran-for=$FEDHPC_FOR"'],
        "envelope": SMALL,
        "name": f"{p.name}-quick",
    }
    quick = (await p.ok(1, "submit_task", quick_args))["task_id"]
    group = await p.ok(
        2,
        "submit_group",
        {
            "objective": f"{p.name}'s pair",
            "envelope": SMALL,
            "children": [{"command": ["sleep", "600"], "name": f"s{i}"} for i in (1, 2)],
        },
    )
    (storage / "devdelta/storage/in.dat").write_text("shared input\n")
    move = {"source": "devdelta:scratch/in.dat", "destination": "devanvil:scratch/copy.dat"}
    transfer = (await p.ok(3, "move_data", move))["transfer_id"]
    children = {c["task_id"] for c in group["children"]}
    go = storage / f"go-{p.name}"
    wait = {"command": ["sh", "-c", f"while [ ! -e {go} ]; do sleep 0.2; done"], "envelope": SMALL}
    gate = (await p.ok(3, "submit_task", {**wait, "name": f"{p.name}-gate"}))["task_id"]
    return Work(long, quick, group["group_id"], children, transfer, gate, go)


async def _tries_every_tool(p: Person, theirs: Work, mine: Work) -> None:
    """From each of `p`'s sessions, every tool and resource that takes an id, on the other's
    work: not_found, as for an id nobody has; and p's own reads still answer."""
    for i in range(len(p.sessions)):
        for tid in (theirs.long, theirs.quick, theirs.group, theirs.transfer):
            await p.not_found(i, "get_result", {"task_id": tid})
        for tid in (theirs.long, theirs.group, *theirs.children):
            await p.not_found(i, "cancel", {"task_id": tid})
        await p.not_found(i, "replan", {"task_id": theirs.long, "exclude_sites": []})
        staged = {**LONG, "stage_in": [theirs.transfer], "name": f"steal{i}"}
        await p.not_found(i, "submit_task", staged)
        for uri in (
            f"fedhpc://tasks/{theirs.long}",
            f"fedhpc://groups/{theirs.group}",
            f"fedhpc://transfers/{theirs.transfer}",
        ):
            await p.unreadable(i, uri)
        subjects = {e["subject"] for e in await p.events(i)}
        assert not subjects & theirs.ids, (p.name, i, subjects & theirs.ids)
        assert subjects <= mine.ids, (p.name, i, subjects - mine.ids)
        got = await p.ok(i, "get_result", {"task_id": mine.long})
        assert got["task_id"] == mine.long
        await p.sessions[i].read_resource(f"fedhpc://transfers/{mine.transfer}")


async def _subscribes(team: Team, token: str, asked: list[str]) -> list[str]:
    """The resource subscriptions a listen stream with `token` honored of `asked`."""
    honored: list[list[str]] = []
    acked = anyio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, SubscriptionsAcknowledgedNotification):
            honored.append(list(message.params.notifications.resource_subscriptions or ()))
            acked.set()

    req = SubscriptionsListenRequest(
        params=SubscriptionsListenRequestParams(
            notifications=SubscriptionFilter.model_validate({"resourceSubscriptions": asked})
        )
    )
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=120)
    async with (
        http,
        Client(
            streamable_http_client(team.resource, http_client=http), message_handler=on_message
        ) as c,
        anyio.create_task_group() as tg,
    ):

        async def stream() -> None:
            await c.session.send_request(req, SubscriptionsListenResult, 3600)

        tg.start_soon(stream)
        with anyio.fail_after(120):
            await acked.wait()
        tg.cancel_scope.cancel()
    return honored[0]


async def _rest_refuses(team: Team, person: str, theirs: Work, mine: Work) -> None:
    """The daemon's REST routes, as the MCP server calls them for `person`: another person's
    ids are not_found, listings hold only their own."""
    async with DaemonClient(DaemonSettings.from_env(home=team.home)) as daemon:
        token = ACTING_FOR.set((team.owner(person), False))
        try:
            for call in (
                lambda: daemon.get_result(ResultRequest(task_id=theirs.long)),
                lambda: daemon.get_result(ResultRequest(task_id=theirs.transfer)),
                lambda: daemon.cancel(CancelRequest(task_id=theirs.long)),
                lambda: daemon.cancel(CancelRequest(task_id=theirs.group)),
                lambda: daemon.replan(ReplanRequest(task_id=theirs.long)),
                lambda: daemon.group(theirs.group),
                lambda: daemon.transfer(TransferRequest(transfer_id=theirs.transfer)),
                lambda: daemon.register_continuation(theirs.long, WAKE),
                lambda: daemon.register_continuation(theirs.transfer, WAKE),
            ):
                with pytest.raises(FedError) as err:
                    await call()
                assert err.value.code == "not_found", (person, err.value)
            listed = {t.task_id for t in await daemon.tasks(limit=1000)}
            assert not listed & theirs.ids and mine.long in listed, (person, listed)
            groups = {g.group_id for g in await daemon.groups(limit=100)}
            assert groups == {mine.group}, (person, groups)
            subjects = {e["subject"] for e in await daemon.events(limit=1000)}
            assert not subjects & theirs.ids, (person, subjects)
            # A continuation on the person's own gate task: its end is delivered.
            mine.wake = await daemon.register_continuation(mine.gate, WAKE)
            team.answers.append(json.dumps(sorted(listed | groups | subjects)))
        finally:
            ACTING_FOR.reset(token)


async def _stage_out_is_its_tasks_owners(team: Team) -> None:
    """A task's stage-out (submitted through the REST route, as the MCP tools have none) is a
    transfer of the task's owner: another person's read of it is not_found."""
    async with DaemonClient(DaemonSettings.from_env(home=team.home)) as daemon:
        token = ACTING_FOR.set((team.owner("alice"), False))
        try:
            req = SubmitTaskRequest.model_validate(
                {
                    "command": ["sh", "-c", "echo out > out.txt"],
                    "envelope": SMALL,
                    "stage_out": [{"source": "out.txt", "destination": "devanvil:scratch/o.txt"}],
                }
            )
            tid = (await daemon.submit_task(req)).task_id
            out = stage_out_id(tid, 0)
            assert (await daemon.transfer(TransferRequest(transfer_id=out))).transfer_id == out
        finally:
            ACTING_FOR.reset(token)
        token = ACTING_FOR.set((team.owner("carol"), False))
        try:
            with pytest.raises(FedError) as err:
                await daemon.transfer(TransferRequest(transfer_id=out))
            assert err.value.code == "not_found"
        finally:
            ACTING_FOR.reset(token)


async def test_two_people_with_four_sessions_each_never_reach_each_others_work(
    team: Team,
) -> None:
    async with AsyncExitStack() as stack:
        sessions = {
            name: [
                await stack.enter_async_context(_client(team.resource, team.mint(name)))
                for _ in range(4)
            ]
            for name in ("alice", "carol")
        }
        admin_token = team.mint("dana", f"{EVERYDAY} fedhpc:admin")
        root = await stack.enter_async_context(_client(team.resource, admin_token))
        alice = Person(team, "alice", sessions["alice"])
        carol = Person(team, "carol", sessions["carol"])
        a = await _submit(alice, team.storage)
        c = await _submit(carol, team.storage)
        # The same copy asked by both: two transfers, neither person answered with the other's.
        assert a.transfer != c.transfer

        # Each person's sessions share their work: what one submitted, every other reads.
        for i in range(4):
            assert (await alice.ok(i, "get_result", {"task_id": a.quick}))["task_id"] == a.quick

        # Both people's events land (the quick tasks end, the copies end) before the checks.
        for p, w in ((alice, a), (carol, c)):

            async def landed(p: Person = p, w: Work = w) -> bool:
                subjects = {e["subject"] for e in await p.events(0)}
                return {w.quick, w.transfer} <= subjects

            await _until(f"{p.name}'s events", landed)

        await _tries_every_tool(carol, a, c)
        await _tries_every_tool(alice, c, a)
        await _rest_refuses(team, "carol", a, c)
        await _rest_refuses(team, "alice", c, a)
        await _stage_out_is_its_tasks_owners(team)

        # Subscriptions: another person's task, group or transfer is not honored.
        asked = [
            f"fedhpc://tasks/{a.long}",
            f"fedhpc://groups/{a.group}",
            f"fedhpc://transfers/{a.transfer}",
            f"fedhpc://tasks/{c.long}",
            f"fedhpc://transfers/{c.transfer}",
        ]
        honored = await _subscribes(team, team.mint("carol"), asked)
        assert honored == [f"fedhpc://tasks/{c.long}", f"fedhpc://transfers/{c.transfer}"]

        # Nothing of alice's was touched by carol's attempts.
        state = (await alice.ok(0, "get_result", {"task_id": a.long}))["state"]
        assert state not in ("cancelled", "completed", "failed"), state

        # Each job names the person it ran for: in its environment, and in its events.
        for p, w in ((alice, a), (carol, c)):
            quick = await p.ok(0, "get_result", {"task_id": w.quick, "preview": "stdout"})
            assert f"ran-for={team.owner(p.name)}" in json.dumps(quick), quick
            ended = [e for e in await p.events(0) if e["subject"] == w.quick]
            assert ended and all(e["payload"]["for"] == team.owner(p.name) for e in ended)

        # The ledger: each person's charges are their own; the admin's view has both.
        for p in (alice, carol):

            async def ledger(p: Person = p, i: int = 0) -> list[dict[str, Any]]:
                read = await p.sessions[i].read_resource("fedhpc://ledger")
                team.answers.append(read.model_dump_json())
                rows: list[dict[str, Any]] = json.loads(read.contents[0].text)["accounts"]  # type: ignore[union-attr]
                return rows

            await _until(f"{p.name}'s ledger", ledger)  # a placed attempt: live or ran
            for i in range(4):
                rows = await ledger(p, i)
                assert rows and {r["owner"] for r in rows} == {team.owner(p.name)}, rows
        read = await root.read_resource("fedhpc://ledger")
        owners = {r["owner"] for r in json.loads(read.contents[0].text)["accounts"]}  # type: ignore[union-attr]
        assert {team.owner("alice"), team.owner("carol")} <= owners, owners

        # The admin reads both people's work, resources and events.
        admin = Person(team, "dana", [root])
        for tid in (a.long, c.long, a.transfer, c.transfer):
            await root.read_resource(
                f"fedhpc://{'transfers' if tid.startswith('x') else 'tasks'}/{tid}"
            )
        subjects = {e["subject"] for e in await admin.events(0)}
        assert {a.quick, c.quick, a.transfer, c.transfer} <= subjects

        # Each cleans up their own; the admin may cancel anyone's.
        await carol.ok(0, "cancel", {"task_id": c.long})
        await carol.ok(1, "cancel", {"task_id": c.group})
        await admin.ok(0, "cancel", {"task_id": a.long})
        await admin.ok(0, "cancel", {"task_id": a.group})
        for w in (a, c):
            w.go.touch()
        await _deliveries_are_their_own(team, {"alice": a, "carol": c})


async def _deliveries_are_their_own(team: Team, work: dict[str, Work]) -> None:
    """Each gate task's end was delivered to its continuation (GET /v1/deliveries without an
    owner: the operator's view); as each person, the route lists only their own."""
    async with DaemonClient(DaemonSettings.from_env(home=team.home)) as daemon:
        wakes = {w.wake for w in work.values()}

        async def both() -> bool:
            return wakes <= {d.continuation_id for d in await daemon.deliveries()}

        await _until("both deliveries", both)
        for person, w in work.items():
            token = ACTING_FOR.set((team.owner(person), False))
            try:
                listed = {d.continuation_id for d in await daemon.deliveries()}
            finally:
                ACTING_FOR.reset(token)
            assert listed == {w.wake}, (person, listed)


def _dashboard_answers(team: Team) -> list[str]:
    """Every read of a real `fedhpc ui` on the service's daemon (the operator's view)."""
    ui = subprocess.Popen(
        [*FEDHPC, "ui", "--port", "0"],
        env=team.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert ui.stdout is not None
        first = ui.stdout.readline()
        found = re.match(r"fedhpc ui: (http://127\.0\.0\.1:\d+)/\?token=(\S+)$", first.strip())
        assert found, first
        base, token = found.groups()
        headers = {"X-Fedhpc-Token": token}
        out = []
        with httpx2.Client(base_url=base, headers=headers, timeout=120) as http:
            tasks = http.get("/api/tasks").json()
            ids = [t["task_id"] for t in tasks.get("tasks", [])][:10]
            paths = [
                "/",
                "/api/health",
                "/api/federation",
                "/api/history",
                "/api/credit",
                "/api/tasks",
                "/api/groups",
                "/api/charges",
                "/api/events",
                "/api/deliveries",
                "/api/estimators",
                *(f"/api/tasks/{t}/timeline" for t in ids),
                *(f"/api/tasks/{t}/output" for t in ids),
            ]
            for path in paths:
                resp = http.get(path)
                assert resp.status_code < 500, (path, resp.text[:300])
                out.append(resp.text)
        return out
    finally:
        ui.send_signal(signal.SIGINT)
        ui.wait(timeout=30)
        for stream in (ui.stdout, ui.stderr):
            if stream is not None:
                stream.close()


async def test_no_token_value_appears_in_any_log_event_row_answer_or_dashboard(
    team: Team,
) -> None:
    """A canary sent as a bearer token, and every token minted in this module (those of the
    four-session test included when it ran first), are nowhere the service writes or says."""
    async with httpx2.AsyncClient(timeout=60) as http:
        for headers in (
            {"Authorization": f"Bearer {CANARY}"},
            {"Authorization": f"Bearer {CANARY}", "Mcp-Session-Id": CANARY},
        ):
            refused = await http.post(
                team.resource,
                json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                headers={"accept": "application/json, text/event-stream", **headers},
            )
            assert refused.status_code in (401, 404), refused.status_code
            team.answers.append(refused.text + json.dumps(dict(refused.headers)))
    token = team.mint("alice")
    async with _client(team.resource, token) as alice:
        # The token's holder asks fedhpc to carry token-like text: it is theirs to store.
        args = {"command": ["true"], "envelope": SMALL, "name": "canary-check"}
        done = await alice.call_tool("submit_task", args)
        team.answers.append(done.model_dump_json())
        tid = json.loads(done.content[0].text)["task_id"]  # type: ignore[union-attr]
        for uri in (f"fedhpc://tasks/{tid}", "fedhpc://federation"):
            team.answers.append((await alice.read_resource(uri)).model_dump_json())
        team.answers.append((await alice.call_tool("list_events", {})).model_dump_json())
    secrets = [CANARY, *team.tokens]
    # Each token's signature alone too: a log that cut a token would still leak this part.
    secrets += [t.rsplit(".", 1)[-1] for t in team.tokens if t.count(".") == 2]
    places: dict[str, str] = {"service.log": team.log.read_text(errors="replace")}
    for path in team.home.rglob("*"):
        if path.is_file() and path.stat().st_size < 50_000_000:
            places[str(path)] = path.read_bytes().decode("utf-8", "replace")
    async with DaemonClient(DaemonSettings.from_env(home=team.home)) as daemon:
        places["events"] = json.dumps(await daemon.events(limit=1000))
    for i, answer in enumerate(team.answers):
        places[f"answer {i}"] = answer
    for i, page in enumerate(_dashboard_answers(team)):
        places[f"dashboard {i}"] = page
    leaks = [(where, s[:16]) for where, text in places.items() for s in secrets if s in text]
    assert not leaks, leaks
    assert len(places) > 20 and len(secrets) > 3
