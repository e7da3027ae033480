"""`notifications/tasks` on the `subscriptions/listen` stream (Tasks extension, 2026-07-28).

`EventWatch` follows the daemon's event log from the newest seq when the first stream opens,
by that seq (durable in the daemon's store: a daemon restart loses nothing, the watch only
waits for it to answer again), and hands each event to the streams watching its subject.
`TaskListen` replaces the SDK's `subscriptions/listen` handler, whose filter knows no
`taskIds`: it serves the SDK's resource events as before, and for every event the agent's
continuation would wake for (DEFAULT_WAKE_EVENTS, a transfer's outcome) or that ends the work
it sends the task's DetailedTask, stamped with the fedhpc event's id and seq
(`_meta["fedhpc/event"]`, `_meta["fedhpc/seq"]`): a continuation's delivery id is
`d<seq>-<continuation>`, so a client woken both ways can tell one event from two."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, cast

import anyio
import structlog
from mcp.server.context import ServerRequestContext
from mcp.server.subscriptions import SubscriptionBus
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import (
    SUBSCRIPTION_ID_META_KEY,
    ResourceUpdated,
    event_matches,
    event_to_notification,
)
from mcp.types import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    ServerNotification,
    SubscriptionFilter,
    SubscriptionsAcknowledgedNotification,
    SubscriptionsAcknowledgedNotificationParams,
    SubscriptionsListenRequestParams,
    SubscriptionsListenResult,
)
from pydantic import BaseModel

from fedhpc.client.wire import ACTING_FOR
from fedhpc.errors import FedError, TransientError
from fedhpc.mcp_server.link import DaemonLink
from fedhpc.mcp_server.task_state import EXTENSION, Handle, detailed_task, owner_of, parse
from fedhpc.mcp_server.tools import TRANSFER_EVENTS
from fedhpc.ops.continuations import DEFAULT_WAKE_EVENTS
from fedhpc.ops.data import TransferRequest
from fedhpc.ops.tasks import ResultRequest

__all__ = ["EventWatch", "TaskListen", "declared"]

log = structlog.get_logger(__name__)

WAKE = frozenset(DEFAULT_WAKE_EVENTS) | frozenset(TRANSFER_EVENTS)
EVENT_META_KEY = "fedhpc/event"
SEQ_META_KEY = "fedhpc/seq"  # a continuation's delivery id is d<seq>-<continuation id>
# A long poll of the daemon's event log: answered as soon as an event lands (of any daemon on
# a shared store), else empty after this; a stream hears an event without polling for it.
_WAIT_S = 25.0
_DOWN_S = 1.0  # the daemon does not answer (restarting): ask again after this
_TERMINAL = frozenset({"completed", "failed", "cancelled"})
MAX_STREAMS = 256  # open listen streams per server (the SDK's own handler allows 1024)
MAX_TASK_IDS = 100  # each is read at once when the stream opens
Listener = Callable[[dict[str, Any]], None]


def declared(ctx: ServerRequestContext[Any, Any]) -> bool:
    caps = ctx.session.client_capabilities
    return bool(caps and caps.extensions and EXTENSION in caps.extensions)


def _subjects(event: dict[str, Any]) -> set[str]:
    """The fedhpc ids an event is about: its subject, the group of a child (child `t<x>-<i>`
    of group `g<x>`, orchestrator/groups.py), and the ids its payload names."""
    subject = str(event.get("subject", ""))
    ids = {subject}
    head = subject.rsplit("-", 1)[0]
    if head != subject and head.startswith("t"):
        ids.add("g" + head[1:])
    payload = event.get("payload")
    if isinstance(payload, dict):
        ids |= {str(payload[k]) for k in ("group_id", "task_id", "transfer_id") if payload.get(k)}
    return ids


class EventWatch:
    """One reader of the daemon's event log per server, running while any stream listens."""

    def __init__(self, link: DaemonLink) -> None:
        self.link = link
        self.cursor: int | None = None
        self._listeners: dict[object, Listener] = {}
        self._wake = anyio.Event()

    async def start_cursor(self) -> None:
        """Fix the cursor at the newest event before a stream's first state check: whatever
        happens after the check is read from the log."""
        if self.cursor is None or not self._listeners:  # nobody read on: start from now
            health = await self.link.call(lambda c: c.health())
            newest = health.get("last_event_seq")
            if newest is None:  # its store does not answer: no "now" to start from
                why = (health.get("store") or {}).get("error") or "the store does not answer"
                raise TransientError(f"the daemon cannot open a stream now: {why}")
            self.cursor = int(newest)

    def watch(self, listener: Listener) -> Callable[[], None]:
        """`listener` gets every event from now on (it filters); returns the unsubscribe."""
        token = object()
        self._listeners[token] = listener
        self._wake.set()
        return lambda: self._listeners.pop(token, None) and None

    async def run(self) -> None:
        while True:
            if not self._listeners or self.cursor is None:
                await self._wake.wait()
                self._wake = anyio.Event()
                continue
            try:
                rows = await self.link.client.events(after=self.cursor, limit=200, wait_s=_WAIT_S)
            except FedError as exc:  # down or restarting: the seq keeps our place
                log.info("event log unreadable; retrying", code=exc.code)
                await anyio.sleep(_DOWN_S)
                continue
            except Exception:  # the server's one watch must outlive a bad answer
                log.exception("event log read failed; retrying")
                await anyio.sleep(_DOWN_S)
                continue
            for row in rows:
                self.cursor = max(self.cursor, int(row["seq"]))
                for listener in list(self._listeners.values()):
                    listener(row)


class _Note(BaseModel):
    method: str
    params: dict[str, Any]


class TaskListen:
    """`subscriptions/listen` with the Tasks extension's `taskIds`."""

    def __init__(self, bus: SubscriptionBus) -> None:
        self.bus = bus
        self.watch: EventWatch | None = None  # set by the server's lifespan
        self.open = 0

    async def __call__(
        self, ctx: ServerRequestContext[DaemonLink, Any], params: SubscriptionsListenRequestParams
    ) -> SubscriptionsListenResult:
        sid = ctx.request_id
        if sid is None:
            raise MCPError(INVALID_REQUEST, "subscriptions/listen requires a request id")
        if self.open >= MAX_STREAMS:
            raise MCPError(INTERNAL_ERROR, "Subscription limit reached")
        asked = params.notifications
        task_ids = (asked.model_extra or {}).get("taskIds") or []
        if isinstance(task_ids, list) and len(task_ids) > MAX_TASK_IDS:
            raise MCPError(
                INVALID_PARAMS, f"at most {MAX_TASK_IDS} taskIds per stream; open another"
            )
        if task_ids and not declared(ctx):
            raise MCPError(
                MISSING_REQUIRED_CLIENT_CAPABILITY,
                "Missing required client capability",
                data={"requiredCapabilities": {"extensions": {EXTENSION: {}}}},
            )
        owner = owner_of(ctx)
        handles: dict[str, Handle] = {}
        for tid in task_ids if isinstance(task_ids, list) else []:
            try:
                handles[str(tid)] = parse(str(tid), owner)
            except MCPError:
                continue  # not this session's: not honored (the ack lists what is)
        resources = [u for u in asked.resource_subscriptions or () if await _readable(ctx, u)]
        honored = SubscriptionFilter(
            tools_list_changed=asked.tools_list_changed or None,
            prompts_list_changed=asked.prompts_list_changed or None,
            resources_list_changed=asked.resources_list_changed or None,
            resource_subscriptions=resources or None,
        )
        if handles:
            honored = honored.model_copy(update={"taskIds": list(handles)})
        uris = frozenset(honored.resource_subscriptions or ())
        meta: dict[str, Any] = {SUBSCRIPTION_ID_META_KEY: sid}
        send, recv = anyio.create_memory_object_stream[Any](1024)

        def put(item: Any) -> None:
            try:
                send.send_nowait(item)
            except (anyio.WouldBlock, anyio.ClosedResourceError):
                log.warning("listen stream backlog full; ending it", subscription=str(sid))
                send.close()

        route = _Route(handles, uris, put)
        if route.wanted and self.watch is not None:
            try:
                await self.watch.start_cursor()
            except FedError as exc:
                raise MCPError(INTERNAL_ERROR, exc.message, data=exc.as_dict()) from exc
        stops = [self.bus.subscribe(lambda e: put(e) if event_matches(honored, uris, e) else None)]
        if route.wanted and self.watch is not None:
            stops.append(self.watch.watch(route))
        self.open += 1
        try:
            await ctx.session.send_notification(
                SubscriptionsAcknowledgedNotification(
                    params=SubscriptionsAcknowledgedNotificationParams(
                        notifications=honored, _meta=meta
                    )
                ),
                related_request_id=sid,
            )
            for tid in handles:  # work that ended before this stream opened says so now
                put(("check", tid, None))
            await self._forward(ctx, recv, handles, meta)
        finally:
            self.open -= 1
            for stop in stops:
                stop()
            send.close()
            recv.close()
        return SubscriptionsListenResult(_meta=meta)

    async def _forward(
        self,
        ctx: ServerRequestContext[DaemonLink, Any],
        recv: Any,
        handles: dict[str, Handle],
        meta: dict[str, Any],
    ) -> None:
        sid = ctx.request_id
        ended: set[str] = set()
        async for item in recv:
            if not isinstance(item, tuple):
                note = event_to_notification(item, meta)
                await ctx.session.send_notification(note, related_request_id=sid)
                continue
            why, tid, event = item
            if tid in ended:
                continue
            try:
                task = await detailed_task(ctx.lifespan_context, tid, handles[tid])
            except (FedError, MCPError) as exc:
                log.info("task state unreadable for a notification", task=tid, error=str(exc))
                continue
            terminal = task["status"] in _TERMINAL
            if why != "wake" and not terminal:
                continue  # not what a continuation wakes for, and nothing ended
            if terminal:
                ended.add(tid)
            extra = {EVENT_META_KEY: event["id"], SEQ_META_KEY: event["seq"]} if event else {}
            status = _Note(
                method="notifications/tasks", params={**task, "_meta": {**meta, **extra}}
            )
            await ctx.session.send_notification(
                cast(ServerNotification, status), related_request_id=sid
            )


async def _readable(ctx: ServerRequestContext[DaemonLink, Any], uri: str) -> bool:
    """In service mode, a task, group or transfer resource is honored only if its caller could
    read it just now (the daemon answers another person's as not found; any other refusal
    is not honored either: fail closed); otherwise every URI is."""
    m = _RESOURCE.match(uri)
    if ACTING_FOR.get() is None or m is None:
        return True
    kind, fid = m[1], m[2]
    try:
        if kind == "tasks":
            await ctx.lifespan_context.call(
                lambda c: c.get_result(ResultRequest(task_id=fid, brief=True, preview="none"))
            )
        elif kind == "transfers":
            await ctx.lifespan_context.call(lambda c: c.transfer(TransferRequest(transfer_id=fid)))
        else:
            await ctx.lifespan_context.call(lambda c: c.group(fid, limit=1))
    except FedError:  # not_found (another person's), or no answer: fail closed
        return False
    return True


_RESOURCE = re.compile(r"^fedhpc://(tasks|groups|transfers)/([A-Za-z0-9_-]{1,64})$")
FEDERATION_URI = "fedhpc://federation"
SITE_EVENTS = frozenset({"site.offline", "site.online"})


class _Route:
    """One stream's share of the event log: its tasks' statuses, and `resources/updated` for
    the fedhpc:// resources it subscribed to (a task, group or transfer on any event about
    it; the federation when a site goes offline or comes back)."""

    def __init__(
        self, handles: dict[str, Handle], uris: frozenset[str], put: Callable[[Any], None]
    ) -> None:
        self.put = put
        self.tasks: dict[str, list[str]] = {}
        for tid, h in handles.items():
            self.tasks.setdefault(h.fid, []).append(tid)
        self.resources = {m[2]: uri for uri in uris if (m := _RESOURCE.match(uri))}
        self.federation = FEDERATION_URI in uris
        self.wanted = bool(self.tasks or self.resources or self.federation)

    def __call__(self, row: dict[str, Any]) -> None:
        about = _subjects(row)
        why = "wake" if row.get("kind") in WAKE else "change"
        for fid in about & self.tasks.keys():
            for tid in self.tasks[fid]:
                self.put((why, tid, row))
        for fid in about & self.resources.keys():
            self.put(ResourceUpdated(uri=self.resources[fid]))
        if self.federation and row.get("kind") in SITE_EVENTS:
            self.put(ResourceUpdated(uri=FEDERATION_URI))
