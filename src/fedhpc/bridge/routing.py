"""The bridge's routing: new events after its cursor become pending deliveries, one per event
and matching continuation, committed with the consumed ids and the cursor in one transaction
(an event is routed once whatever crashes); and which queue a delivery waits in."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from datetime import datetime
from typing import Any

import structlog
from pydantic import ValidationError

from fedhpc.bridge.payload import build_payload
from fedhpc.ops.continuations import ContinuationSpec, Runtime
from fedhpc.store import Event, Store

__all__ = ["SESSIONS", "route_events", "session_key"]

log = structlog.get_logger(__name__)

SESSIONS = (Runtime.CLAUDE_CODE, Runtime.CODEX)  # the runtimes that resume an agent session


def session_key(spec: ContinuationSpec) -> str:
    """What runs one resume at a time: the agent session, else the same target (command,
    url or inbox), whichever task or group it was registered for."""
    if spec.runtime in SESSIONS and spec.session_id:
        return f"{spec.runtime.value}:{spec.session_id}"
    target = spec.model_dump(mode="json", exclude={"events"})
    digest = hashlib.sha256(json.dumps(target, sort_keys=True).encode()).hexdigest()[:16]
    return f"{spec.runtime.value}:{digest}"


def _group_event(e: Event) -> bool:
    """An event a group's continuation receives: the group's own (`group.*`). Its children's
    per-task events do not wake it (1,000 failing children would be 1,000 events in one
    resume); `group.round_terminal` reports them, counted by state."""
    return e.kind.startswith("group.") and bool(e.payload.get("group_id"))


async def _attempts(store: Store, event: Event) -> list[dict[str, Any]]:
    task_id = event.payload.get("task_id")
    if not task_id:
        return []
    return [r["body"] for r in await store.attempts(str(task_id))]


async def _payload(store: Store, e: Event, delivery_id: str) -> dict[str, Any]:
    """The resume payload; an event (or attempt) it cannot read is still delivered, with only
    what the event's own fields say (kind, subject, state), never dropped and never a stop of
    the routing of every other event behind it."""
    try:
        return build_payload(
            e.model_dump(mode="json"), await _attempts(store, e), delivery_id=delivery_id
        )
    except Exception:
        log.exception("building a resume payload failed", event_id=e.id, subject=e.subject)
    known: dict[str, Any] = {"state": e.payload.get("state")}
    known.update({k: v for k in ("task_id", "group_id") if isinstance(v := e.payload.get(k), str)})
    bare = {"kind": e.kind, "subject": e.subject, "payload": known}
    return build_payload(bare, [], delivery_id=delivery_id)


async def route_events(store: Store, consumer: str, clock: Callable[[], datetime]) -> int:
    """New events after `consumer`'s cursor -> pending deliveries, committed with the cursor.
    Returns how many deliveries it recorded."""
    cursor = await store.cursor(consumer)
    events = await store.events_after(cursor, limit=200)
    if not events:
        return 0
    done = await store.consumed(consumer, [e.id for e in events])
    subjects = {e.subject for e in events} | {
        str(e.payload["group_id"]) for e in events if _group_event(e)
    }
    conts = await store.continuations_for(sorted(subjects))
    now = clock()
    plans: list[tuple[str, Event, dict[str, Any], dict[str, Any]]] = []
    for e in events:
        if e.id in done:
            continue  # consumed before a crash: never routed twice
        if e.payload.get("answered"):
            continue  # its caller read it in the answer (a move_data that failed at once)
        for c in conts:
            try:
                spec = ContinuationSpec.model_validate(c["body"])
            except ValidationError:
                log.warning("unusable continuation (no bound session)", continuation=c["id"])
                continue
            if e.kind not in spec.events:
                continue
            if c["subject"] != e.subject and not (
                _group_event(e) and c["subject"] == e.payload.get("group_id")
            ):
                continue  # a group hears its own events; a child's go to its own only
            did = f"d{e.seq}-{c['id']}"
            body = {
                "payload": await _payload(store, e, did),
                "runtime": c["runtime"],
                "spec": c["body"],
                "seq": e.seq,
                "kind": e.kind,
                "subject": e.subject,
                "key": session_key(spec),
            }
            plans.append((did, e, c, body))
    async with store.transaction() as tx:
        for did, e, c, body in plans:
            await tx.put_delivery(
                did,
                event_id=e.id,
                continuation_id=c["id"],
                state="pending",
                attempts=0,
                next_at=now,
                at=now,
                body=body,
            )
        await tx.mark_consumed(consumer, [e.id for e in events], at=now)
        await tx.set_cursor(consumer, events[-1].seq, at=now)
    return len(plans)
