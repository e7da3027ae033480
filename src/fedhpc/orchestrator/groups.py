"""Task groups: children share objective, envelope, round and policy; spread across systems
is soft and is relaxed for a child still pending when its siblings are done.

A group is accepted in one transaction (the group, every child as a queued task, its
continuation) and answered at once; the placer places and dispatches the children. Child i of
group g<hex> is task t<hex>-<i> (zero-padded), so an answer names every child in one line."""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable, Iterator
from datetime import datetime
from typing import Any, Literal

import anyio
import structlog

from fedhpc.domain.job import TERMINAL, JobState
from fedhpc.logs import isolated
from fedhpc.ops.task_views import ChildView, GroupView
from fedhpc.ops.tasks import SubmitGroupRequest, SubmitTaskRequest
from fedhpc.orchestrator import idem
from fedhpc.orchestrator.accept import WAITING_FOR_PROBES, Acceptance
from fedhpc.orchestrator.book import TaskNotFound
from fedhpc.orchestrator.door import check_envelope
from fedhpc.orchestrator.records import AttemptRecord, TaskRecord, new_id
from fedhpc.settings import STALL_S

__all__ = [
    "LISTED",
    "STALL_AFTER_S",
    "UNKNOWN_GROUP_HINT",
    "Groups",
    "group_id_for",
    "group_state",
]

log = structlog.get_logger(__name__)

GroupState = Literal["placing", "running", "completed", "failed", "cancelled"]

LISTED = 20  # children listed in a submit answer; the group resource lists all
# Nothing lists groups (no command, tool or resource): where a group id can be found.
UNKNOWN_GROUP_HINT = (
    "No command or tool lists groups: use the group_id in submit_group's answer, or find it "
    "in the GROUP column of `fedhpc tasks` or in a child's get_result (group_id)."
)
GROUP_WAIT_S = 1.0  # a group small enough to be listed waits this long for its placements
# A child pending this long (at least three control cycles) after its siblings are done is
# stalled: a child the scheduler has only just queued is not (FEDHPC_STALL_S).
STALL_AFTER_S = float(STALL_S.default or 15)


def group_id_for(key: str) -> str:
    return "g" + hashlib.sha256(key.encode()).hexdigest()[:11]


def group_state(states: list[str]) -> GroupState:
    if not all(s in TERMINAL for s in states):
        return "placing" if JobState.QUEUED.value in states else "running"
    if all(s == JobState.COMPLETED.value for s in states):
        return "completed"
    if all(s == JobState.CANCELLED.value for s in states):
        return "cancelled"
    return "failed"


def _decision(c: dict[str, Any]) -> str:
    """The child's decision, unless it is cancelled with no site shown: its stored decision is
    from before the cancel ('queued: placing'), which would read as still to be placed."""
    if c["state"] != JobState.CANCELLED.value or c["attempt"] is not None:
        return str(c["decision"])
    if not c["attempts"]:
        return "cancelled before placement: it never reached a site"
    # No current attempt: the cancel superseded a live one, or an earlier replan or retry had
    # and the child waited to be placed again when it was cancelled; both read the same here.
    return f"cancelled; no current attempt: get_result('{c['id']}') lists the attempts it had"


def _child(c: dict[str, Any]) -> ChildView:
    att = c["attempt"] or {}
    return ChildView(
        task_id=c["id"],
        name=c["name"],
        state=JobState(c["state"]),
        site=att.get("site"),
        partition=att.get("partition"),
        job_id=att.get("job_id"),
        decision=_decision(c),
        reasons=tuple(c["reasons"]),
    )


class Groups:
    """Accepts groups, shows them, and closes their rounds; a child stalled behind finished
    siblings is re-placed without the spread constraint (`replace`, if that helps)."""

    def __init__(
        self,
        deps: Acceptance,
        *,
        cycle_s: float,
        replace: Callable[[TaskRecord, AttemptRecord], Awaitable[bool]],
        stall_s: float = STALL_AFTER_S,
    ) -> None:
        self.deps = deps
        self.cycle_s = cycle_s
        self.stall_s = stall_s
        self.replace = replace

    async def submit(
        self, req: SubmitGroupRequest, *, wait_s: float = GROUP_WAIT_S, owner: str | None = None
    ) -> GroupView:
        """Accept the group durably and answer; a small group waits up to `wait_s` so that its
        answer shows where each child went. `owner` (service mode) is written with the group
        and its children, in the same transaction."""
        gid, fresh = await self._accept(req, owner)
        if not fresh:
            return await self._existing(gid, req)
        self.deps.wake_placer()
        if wait_s > 0 and len(req.children) <= LISTED:
            ids = [c["id"] for c in await self.deps.book.store.group_children(gid)]
            await self.deps.wait_placed(ids, wait_s)
        return await self.view(gid, limit=LISTED)

    async def _accept(self, req: SubmitGroupRequest, owner: str | None) -> tuple[str, bool]:
        check_envelope(req.envelope, self.deps.collector.sites)  # one envelope, every child
        dedupe = idem.dedupe_key(req)
        key = req.idempotency_key or f"auto:{new_id('k')}"
        gid = group_id_for(key)
        async with self.deps.accepting:
            now = self.deps.clock()
            found = await self.deps.book.store.get_group(gid)
            if found is not None:
                if found["owner"] != owner:  # another person's key: tell nothing of it
                    raise idem.IdempotencyConflict("this idempotency_key is already in use")
                return gid, False
            if dedupe is not None:
                earlier = await self.deps.book.store.group_by_dedupe(
                    dedupe, idem.since(now, self.deps.retry_window_s)
                )
                if earlier is not None and earlier["owner"] == owner:
                    return str(earlier["id"]), False
            n = len(req.children)
            body = {
                "objective": req.objective,
                "key": key,
                "digest": idem.request_digest(req),
                "required": [c.required for c in req.children],
                "spread": req.spread,
                "size": n,
            }
            async with self.deps.book.store.transaction() as tx:
                await tx.put_group(
                    gid, state="running", round_=1, body=body, at=now, dedupe=dedupe, owner=owner
                )
                children = self._children(req, gid, key, now, owner)
                await tx.insert_tasks(children, at=now, owner=owner)
                if req.continuation is not None:
                    await self.deps.book.put_continuation(tx, gid, req.continuation)
        log.info("group accepted", group=gid, children=n)
        self.deps.notify()
        return gid, True

    def _children(
        self, req: SubmitGroupRequest, gid: str, key: str, now: datetime, owner: str | None
    ) -> Iterator[tuple[str, str, str | None, str, dict[str, Any]]]:
        """Each child's row, made as the insert consumes it (never all bodies at once). The children
        differ only in id, key, command and label: one validated record is the template."""
        width = len(str(len(req.children) - 1))
        prefix = "t" + gid[1:]
        decision = "queued: placing" if self.deps.collector.ready.is_set() else WAITING_FOR_PROBES
        first = req.children[0]
        template = TaskRecord(
            id=f"{prefix}-{0:0{width}d}",
            idempotency_key=f"{key}:child:0",
            state=JobState.QUEUED,
            created_at=now,
            group_id=gid,
            decision=decision,
            owner=owner,
            request=SubmitTaskRequest(
                command=first.command,
                envelope=req.envelope,
                name=first.name,
                policy=req.policy,
                goal=req.goal,
                workdir=req.workdir,
                env=req.env,
                adaptation=req.adaptation,
                idempotency_key=f"{key}:child:0",
            ),
        ).model_dump(mode="json")
        for i, child in enumerate(req.children):
            tid, ckey = f"{prefix}-{i:0{width}d}", f"{key}:child:{i}"
            request = {
                **template["request"],
                "command": list(child.command),
                "name": child.name,
                "idempotency_key": ckey,
            }
            body = {**template, "id": tid, "idempotency_key": ckey, "request": request}
            yield tid, ckey, gid, JobState.QUEUED.value, body

    async def _existing(self, gid: str, req: SubmitGroupRequest) -> GroupView:
        group = await self.deps.book.store.get_group(gid)
        assert group is not None
        by_key = bool(req.idempotency_key) and group["body"].get("key") == req.idempotency_key
        stored = group["body"].get("digest")
        if by_key and not req.key_generated and stored and stored != idem.request_digest(req):
            raise idem.IdempotencyConflict(
                f"idempotency_key {req.idempotency_key!r} already names group {gid}, "
                "submitted with other arguments"
            )
        view = await self.view(gid, limit=LISTED)
        created = datetime.fromisoformat(str(group["created_at"]))
        note = idem.existing_note(
            "group",
            gid,
            created,
            view.state,
            by_key=by_key,
            window_s=self.deps.retry_window_s,
            now=self.deps.clock(),
        )
        update: dict[str, object] = {"existing": note}
        if view.state not in ("placing", "running"):
            update["next"] = (
                f"The group already ended ({view.state}): its results are available now (read "
                f"fedhpc://groups/{gid}, then get_result per child). No event will follow for it."
            )
        return view.model_copy(update=update)

    async def view(
        self, gid: str, *, limit: int | None = None, after: str | None = None
    ) -> GroupView:
        """The group: counts per state and per site for all children (in SQL); children
        listed in order after `after`, up to `limit` (all when None), with `next_after` when
        more follow."""
        store = self.deps.book.store
        page = None if limit is None else limit + 1  # one more: whether another page follows
        # The three reads at once: queued together on the store's reader, they cost one wait
        # for its thread and one for the loop, not three of each (under load each wait is a
        # scheduler slot: tens of ms).
        got: dict[str, Any] = {}

        async def read(key: str, call: Awaitable[Any]) -> None:
            got[key] = await call

        async with anyio.create_task_group() as tg:
            tg.start_soon(read, "group", store.get_group(gid))
            tg.start_soon(read, "summary", store.group_summary(gid))
            tg.start_soon(read, "rows", store.group_children(gid, after=after, limit=page))
        group, summary, rows = got["group"], got["summary"], got["rows"]
        if group is None:
            raise TaskNotFound(f"no group {gid!r}", hint=UNKNOWN_GROUP_HINT)
        counts: dict[str, int] = summary["counts"]
        size = sum(counts.values())
        listed = rows if limit is None else rows[:limit]
        more = len(rows) > len(listed)
        first, last = summary["first"], summary["last"]
        span = first if size == 1 else (f"{first} … {last}" if size else "")
        states = [s for s, n in counts.items() for _ in range(min(n, 1))]
        return GroupView(
            group_id=gid,
            objective=str(group["body"]["objective"]),
            state=group_state(states),
            round=int(group["round"]),
            size=size,
            child_ids=span,
            counts=counts,
            sites=dict(sorted(summary["sites"].items())),
            children=tuple(_child(c) for c in listed),
            omitted=size - len(listed),
            next_after=listed[-1]["id"] if more and listed else None,
        )

    async def advance(self) -> None:
        """Relax spread for a child stalled behind finished siblings; close finished rounds.
        Reads the counts per state in SQL and only the children it may act on (live, or with
        an attempt still pending): a 5,000-child group with one child left reads one."""
        terminal = sorted(s.value for s in TERMINAL)
        for gid in await self.deps.book.store.groups_in(("running",)):
            with isolated("advancing a group failed", group=gid):  # never the other groups
                await self._advance(gid, terminal)

    async def _advance(self, gid: str, terminal: list[str]) -> None:
        """One running group: its stalled last child relaxed, its round closed when over."""
        group = await self.deps.book.store.get_group(gid)
        assert group is not None
        body: dict[str, Any] = group["body"]
        # Every child counts for the round: with two or more still live, the round is not over
        # and no child is the last one left (nothing to relax): skip reading them.
        every = all(body.get("required") or [True])
        counts = await self.deps.book.store.group_counts(gid)
        size = sum(counts.values())
        live = sum(n for s, n in counts.items() if s not in TERMINAL)
        if every and live >= 2:
            return
        required: list[bool] = body.get("required") or [True] * size
        if size < len(required):
            return  # an older submit_group still adding children: no round can be over yet
        children = await self.deps.book.store.group_children(gid, acting=terminal)
        now = self.deps.clock()
        stall_s = max(self.stall_s, 3 * self.cycle_s)
        for c in children:
            att = c["attempt"]
            if att is None or att["state"] != JobState.PENDING.value or c["relaxed"]:
                continue
            since = att.get("pending_since")
            if since is None or (now - datetime.fromisoformat(since)).total_seconds() < stall_s:
                continue  # just queued (the last of a large group): not stalled yet
            if size > 1 and live - (c["state"] not in TERMINAL) == 0:
                await self._relax(gid, c["id"], att["n"])
        # The round is over when no required child is live (child i counts as required[i]).
        done = not any(
            c["state"] not in TERMINAL
            and int(c["index"]) < len(required)
            and required[int(c["index"])]
            for c in children
        )
        if not done:
            return
        view = await self.view(gid, limit=0)
        state = view.state if view.state not in ("placing", "running") else "completed"
        async with self.deps.book.store.transaction() as tx:
            await tx.put_group(
                gid, state=state, round_=int(group["round"]), body=body, at=self.deps.clock()
            )
            await tx.append_event(
                "group.round_terminal",
                gid,
                {
                    "group_id": gid,
                    "round": int(group["round"]),
                    "state": state,
                    "counts": view.counts,
                    "result": f"fedhpc://groups/{gid}",
                },
                at=self.deps.clock(),
                key=f"group.round_terminal:{gid}:{group['round']}",
            )

    async def _relax(self, gid: str, task_id: str, n: int) -> None:
        """The last child still pending: drop the spread constraint and move it if that helps."""
        task = await self.deps.book.load_task(task_id)
        att: AttemptRecord | None = next(
            (a for a in await self.deps.book.load_attempts(task_id) if a.n == n), None
        )
        if att is None:
            return
        task.spread_relaxed = True
        moved = await self.replace(task, att)
        if not moved:
            async with self.deps.book.store.transaction() as tx:
                await self.deps.book.save(tx, task, at=self.deps.clock())
                await tx.append_event(
                    "group.stalled_child",
                    gid,
                    {
                        "group_id": gid,
                        "task_id": task.id,
                        "site": att.site,
                        "reason": att.reason or "pending",
                        "result": f"fedhpc://groups/{gid}",
                    },
                    at=self.deps.clock(),
                    key=f"group.stalled_child:{gid}:{task.id}",
                )
        log.info("relaxed spread", group=gid, task=task.id, moved=moved)
