"""`fedhpc relay`: resume a person's agent on their own machine when their work on a fedhpc
service ends (issue 34). The service cannot start `claude --resume` on a laptop, so the relay
runs there: it follows the person's events on the service (`list_events` with its consumer
name and `wait_s`, over the service's MCP endpoint with the person's token), mirrors each into
a local store with the relay's continuation bound to its subject, and acknowledges it on the
service only once that local write committed. The local resume bridge (`Bridge`, the daemon's
own) then resumes the session from that store: at most one resume in flight per session,
never a second resume of one event across restarts. So each event resumes once whatever is
killed when: a relay killed before its acknowledgement reads the same events again, and the
local store keeps one copy of each (keyed by the service's event id)."""

from __future__ import annotations

import stat
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio
import httpx2
import structlog
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from fedhpc.bridge.service import Bridge
from fedhpc.client.relay_bindings import bound_spec
from fedhpc.client.relay_signin import sign_in_provider
from fedhpc.errors import UsageError
from fedhpc.ops.continuations import ContinuationSpec
from fedhpc.store import Store
from fedhpc.store.continuations import put_continuation

__all__ = ["REMOTE", "RelayConfig", "mirror", "read_token", "run_relay"]

log = structlog.get_logger(__name__)

_WORK = ("task_id", "group_id", "transfer_id")  # an event's work, as its payload names it
REMOTE = "relay-remote"  # the local store's cursor: the service's newest event mirrored here
PAGE = 200  # events per list_events call
BACKOFF_S = (1.0, 2.0, 5.0, 10.0, 30.0)  # after a failed call, growing while calls fail


@dataclass(frozen=True)
class RelayConfig:
    """`service`: the service's MCP URL; `token_file`: the person's access token (0600, read
    again at each connection, so whatever renews it may rewrite it); `consumer`: the cursor's
    name on the service; `spec`: what to resume; `home`: the relay's folder (its store)."""

    service: str
    token_file: Path | None  # None: the relay's own sign-in (`relay_signin`)
    consumer: str
    spec: ContinuationSpec | None  # what wakes for work no session was recorded for
    home: Path
    bindings: Path | None = None  # sessions the PostToolUse hook recorded (`relay_bindings`)
    wait_s: float = 30.0
    callback_port: int = 8976  # the sign-in's return, on loopback

    @property
    def tokens(self) -> Path:
        """Where the relay's own sign-in keeps its tokens (0600)."""
        return self.home / "oauth.json"


def read_token(path: Path) -> str:
    """The bearer token in `path`, refused when others may read it (a token is a credential)."""
    try:
        mode = path.stat().st_mode
        text = path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise UsageError(
            f"cannot read the token file {path}: {exc.strerror}",
            hint="Write your access token there (chmod 600).",
        ) from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise UsageError(
            f"the token file {path} may be read by others",
            hint=f"Run `chmod 600 {path}`: a token is a credential.",
        )
    if not text or any(c.isspace() for c in text):
        raise UsageError(f"{path} holds no single token", hint="Write the token alone there.")
    return text


@dataclass
class _Refusal:
    """The HTTP status of the service's last refusal of the token (401: expired, revoked or
    not the service's audience; 403: a scope or the person is not allowed), else None. The
    MCP client reports such an answer as an internal error: the status is read here."""

    status: int | None = None

    async def __call__(self, response: httpx2.Response) -> None:
        if response.status_code in (401, 403):
            self.status = response.status_code


@asynccontextmanager
async def _session(cfg: RelayConfig, refusal: _Refusal) -> AsyncIterator[Client]:
    hooks: dict[str, list[Callable[..., Any]]] = {"response": [refusal]}
    timeout = cfg.wait_s + 30.0
    if cfg.token_file is None:
        auth = sign_in_provider(cfg.service, cfg.tokens, cfg.callback_port)
        http = httpx2.AsyncClient(auth=auth, timeout=timeout, event_hooks=hooks)
    else:
        token = read_token(cfg.token_file)
        headers = {"Authorization": f"Bearer {token}"}
        http = httpx2.AsyncClient(headers=headers, timeout=timeout, event_hooks=hooks)
    async with (
        http,
        Client(streamable_http_client(cfg.service, http_client=http), mode="legacy") as client,
    ):
        yield client


async def _call(client: Client, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    result = await client.call_tool(tool, args)
    body: dict[str, Any] | None = result.structured_content
    if result.is_error or body is None:
        text = "".join(getattr(c, "text", "") for c in result.content)
        raise UsageError(f"the service refused {tool}: {text[:300]}")
    return body


async def mirror(
    store: Store,
    events: list[dict[str, Any]],
    spec: ContinuationSpec | None,
    bindings: Path | None = None,
) -> int:
    """The service's `events` into the local store in one transaction: each once (keyed by
    its id), with its session bound to its subject (and a group event's group): the one the
    PostToolUse hook recorded for its work in `bindings`, else `spec`; and the remote cursor
    past them. Returns how many were new."""
    new = 0
    async with store.transaction() as tx:
        for e in events:
            at = datetime.fromisoformat(e["created_at"])
            subjects = {e["subject"]}
            group = e["payload"].get("group_id")
            if e["kind"].startswith("group.") and isinstance(group, str):
                subjects.add(group)
            ids = [e["subject"], *(str(e["payload"].get(k) or "") for k in _WORK)]
            bound = bound_spec(bindings, ids) if bindings is not None else None
            chosen = bound or spec
            if chosen is None:  # mirrored and acknowledged, but it wakes nobody here
                log.warning("relay: no session bound to this work", subject=e["subject"])
            for subject in sorted(subjects):
                if chosen is not None:
                    await put_continuation(tx, subject, chosen, at=at)
            kept = await tx.append_event(
                e["kind"], e["subject"], e["payload"], at=at, key=f"relay:{e['id']}"
            )
            new += kept is not None
        if events:
            last = events[-1]
            at = datetime.fromisoformat(last["created_at"])
            await tx.set_cursor(REMOTE, int(last["seq"]), at=at)
    return new


async def _follow(cfg: RelayConfig, store: Store, bridge: Bridge, refusal: _Refusal) -> None:
    """One connection's life: pages of events, each mirrored, then acknowledged."""
    async with _session(cfg, refusal) as client:
        log.info("relay connected", service=cfg.service, consumer=cfg.consumer)
        while True:
            after = await store.cursor(REMOTE)
            args = {"after": after, "limit": PAGE, "consumer": cfg.consumer, "wait_s": cfg.wait_s}
            page = await _call(client, "list_events", args)
            events = page["events"]
            if not events:
                continue
            new = await mirror(store, events, cfg.spec, cfg.bindings)
            bridge.wake.set()
            through = int(events[-1]["seq"])
            await _call(client, "ack_events", {"consumer": cfg.consumer, "through": through})
            log.info("relay mirrored", events=len(events), new=new, through=through)


def _stamp(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except OSError:
        return None


async def _back_off(token_file: Path | None, wait: float) -> None:
    """Wait `wait` s, or less: a token file written meanwhile (a new token) is tried at once."""
    if token_file is None:
        await anyio.sleep(wait)
        return
    before = _stamp(token_file)
    with anyio.move_on_after(wait):
        while _stamp(token_file) == before:  # noqa: ASYNC110 (a file: no event to await)
            await anyio.sleep(0.25)


async def _follow_forever(cfg: RelayConfig, store: Store, bridge: Bridge) -> None:
    """`_follow`, again after every failure (the service down, the token expired or refused:
    logged, then tried again with back-off); the work already submitted runs on at the
    service meanwhile."""
    failures = 0
    while True:
        refusal = _Refusal()
        try:
            await _follow(cfg, store, bridge, refusal)
        except Exception as exc:  # every failure is told and tried again
            wait = BACKOFF_S[min(failures, len(BACKOFF_S) - 1)]
            failures += 1
            if refusal.status is not None:  # the person's move: said plainly, in the log
                fix = (
                    f"write a new one to {cfg.token_file} (read at once)"
                    if cfg.token_file is not None
                    else f"sign in again (remove {cfg.tokens} and start the relay)"
                )
                log.warning(
                    f"relay: the service refused your token (HTTP {refusal.status}): expired, "
                    f"revoked or without the scopes; {fix}; your work runs on meanwhile",
                    seconds=wait,
                )
            else:
                log.warning(
                    "relay: the service call failed; trying again",
                    error=f"{type(exc).__name__}: {str(exc)[:300]}",
                    seconds=wait,
                    exc_info=exc,  # its traceback: an unexpected failure is found by it
                )
            await _back_off(cfg.token_file, wait)


async def run_relay(cfg: RelayConfig, stopping: anyio.Event) -> None:
    """Follow the service and resume locally until `stopping` is set."""
    cfg.home.mkdir(parents=True, exist_ok=True, mode=0o700)
    store = await Store.open(cfg.home / "relay.db")
    bridge = Bridge(store, cfg.home)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(bridge.run, stopping)
            tg.start_soon(_follow_forever, cfg, store, bridge)
            await stopping.wait()
            tg.cancel_scope.cancel()
    finally:
        await store.close()
