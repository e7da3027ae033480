"""The resume bridge: routes new events to their continuations (cursor, consumed ids and the
delivery records in one transaction) and delivers them: at most one resume in flight per
session, events that arrive meanwhile coalesced into the next resume in event order, a retry
never re-sending what the session already holds, bounded retries, a dead-letter state, and no
second resume after a daemon restart."""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import httpx2
import structlog
from pydantic import ValidationError

from fedhpc.bridge.payload import batch_size, build_payload, prompt_text
from fedhpc.bridge.records import seen
from fedhpc.bridge.runtimes import (
    Outcome,
    binary,
    check_result,
    collect,
    kill,
    launch,
    model_answered,
    process_alive,
    resume_env,
    tail_of,
)
from fedhpc.bridge.warm import WarmServer
from fedhpc.domain.config import ResumeConfig
from fedhpc.errors import FedError, TransientError
from fedhpc.inbox import append_line
from fedhpc.ops.continuations import ContinuationSpec, Runtime
from fedhpc.store import Event, Store

__all__ = ["Bridge", "session_key"]

log = structlog.get_logger(__name__)

_SESSIONS = (Runtime.CLAUDE_CODE, Runtime.CODEX)
_LAUNCH_S = 60.0  # a launch's shell has recorded the pid by then (it times out at 30 s)


def _utcnow() -> datetime:
    return datetime.now(UTC)


def session_key(spec: ContinuationSpec) -> str:
    """What runs one resume at a time: the agent session, else the same target (command,
    url or inbox), whichever task or group it was registered for."""
    if spec.runtime in _SESSIONS and spec.session_id:
        return f"{spec.runtime.value}:{spec.session_id}"
    target = spec.model_dump(mode="json", exclude={"events"})
    digest = hashlib.sha256(json.dumps(target, sort_keys=True).encode()).hexdigest()[:16]
    return f"{spec.runtime.value}:{digest}"


def _group_event(e: Event) -> bool:
    """An event a group's continuation receives: the group's own (`group.*`). Its children's
    per-task events do not wake it (1,000 failing children would be 1,000 events in one
    resume); `group.round_terminal` reports them, counted by state."""
    return e.kind.startswith("group.") and bool(e.payload.get("group_id"))


class Bridge:
    """A daemon service. `route()` turns events into deliveries; `deliver()` runs them."""

    CONSUMER = "bridge"

    def __init__(
        self,
        store: Store,
        home: Path,
        *,
        clock: Callable[[], datetime] = _utcnow,
        max_attempts: int = 4,
        backoff_s: float = 5.0,
        process_timeout_s: float = 1800.0,
        start_timeout_s: float = 120.0,
        poll_s: float = 1.0,
        resume: Callable[[], ResumeConfig] = ResumeConfig,
        warm_mcp: bool = False,
    ) -> None:
        self.store = store
        self.home = home
        self.clock = clock
        self.max_attempts = max_attempts
        self.backoff_s = backoff_s
        self.process_timeout_s = process_timeout_s
        self.start_timeout_s = start_timeout_s
        self.poll_s = poll_s
        self.resume = resume  # read at each launch: a fixed config needs no daemon restart
        self.warm = WarmServer(home) if warm_mcp else None
        self.wake = anyio.Event()

    def blocker(self, runtime: str) -> str:
        """Why a resume of `runtime` cannot start now ("" when it can): the `[resume]` config
        does not load, or the agent CLI is not where it would be run. Read at each answer, so a
        fixed config counts at once."""
        try:
            kind = Runtime(runtime)
            if kind not in _SESSIONS:
                return ""  # a `command` continuation names its own program
            cfg = self.resume().get(runtime)
            binary(kind, cfg, resume_env(cfg, self.home))
        except FedError as exc:
            return f"{exc.message}. {exc.hint}" if exc.hint else exc.message
        except ValueError:  # an unknown runtime: the spec's own validation reports it
            return ""
        return ""

    # -- routing ----------------------------------------------------------------------------
    async def _attempts(self, event: Event) -> list[dict[str, Any]]:
        task_id = event.payload.get("task_id")
        if not task_id:
            return []
        return [r["body"] for r in await self.store.attempts(str(task_id))]

    async def route(self) -> int:
        """New events after the cursor -> pending deliveries, committed with the cursor."""
        cursor = await self.store.cursor(self.CONSUMER)
        events = await self.store.events_after(cursor, limit=200)
        if not events:
            return 0
        done = await self.store.consumed(self.CONSUMER, [e.id for e in events])
        subjects = {e.subject for e in events} | {
            str(e.payload["group_id"]) for e in events if _group_event(e)
        }
        conts = await self.store.continuations_for(sorted(subjects))
        now = self.clock()
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
                    "payload": build_payload(
                        e.model_dump(mode="json"), await self._attempts(e), delivery_id=did
                    ),
                    "runtime": c["runtime"],
                    "spec": c["body"],
                    "seq": e.seq,
                    "kind": e.kind,
                    "subject": e.subject,
                    "key": session_key(spec),
                }
                plans.append((did, e, c, body))
        async with self.store.transaction() as tx:
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
            await tx.mark_consumed(self.CONSUMER, [e.id for e in events], at=now)
            await tx.set_cursor(self.CONSUMER, events[-1].seq, at=now)
        return len(plans)

    # -- records ----------------------------------------------------------------------------
    async def _save_all(
        self, ds: list[dict[str, Any]], state: str, *, next_at: datetime | None = None
    ) -> None:
        """One transaction for a resume's deliveries: they change state together."""
        async with self.store.transaction() as tx:
            for d in ds:
                await tx.put_delivery(
                    d["id"],
                    event_id=d["event_id"],
                    continuation_id=d["continuation_id"],
                    state=state,
                    attempts=d["attempts"],
                    next_at=next_at or self.clock(),
                    body=d["body"],
                    at=self.clock(),
                )

    async def _failed(self, ds: list[dict[str, Any]], error: str) -> None:
        now = self.clock()
        for d in ds:
            d["attempts"] += 1
            d["body"] = {**d["body"], "last_error": error[:2000]}
            if d["attempts"] >= self.max_attempts:
                log.warning("delivery dead", delivery=d["id"], error=error[:300])
                await self._save_all([d], "dead")
                continue
            delay = min(300.0, self.backoff_s * 2 ** (d["attempts"] - 1))
            log.info("delivery retry", delivery=d["id"], in_s=delay, error=error[:200])
            await self._save_all([d], "pending", next_at=now + timedelta(seconds=delay))

    def _folder(self, resume_id: str) -> Path:
        return self.home / "deliveries" / resume_id

    # -- delivery ---------------------------------------------------------------------------
    async def _deliver_direct(self, d: dict[str, Any], spec: ContinuationSpec) -> None:
        payload: dict[str, Any] = d["body"]["payload"]
        try:
            if spec.runtime is Runtime.INBOX:
                self._to_inbox(spec, payload)
            else:
                await self._post(spec, payload, d["id"])
        except FedError as exc:
            await self._failed([d], exc.message)
            return
        await self._save_all([d], "delivered")

    async def _launch(self, ds: list[dict[str, Any]]) -> None:
        """One resume for the session's oldest pending deliveries (event order, at most
        BATCH_EVENTS and BATCH_BYTES of prompt), marked `started`
        (committed before the process exists: after a crash, a started resume with an rc file
        is finished, one with a live pid is waited for)."""
        spec = ContinuationSpec.model_validate(ds[-1]["body"]["spec"])
        if spec.runtime not in _SESSIONS:
            ds = ds[:1]  # a command gets one payload on stdin
        else:  # capped: the rest wait (the session is busy) and ride the next resume, in order
            ds = ds[: batch_size([d["body"]["payload"] for d in ds])]
        rid = f"r{ds[0]['body'].get('seq', 0)}-{secrets.token_hex(3)}"
        try:
            cfg = self.resume().get(spec.runtime.value)
            payloads = [d["body"]["payload"] for d in ds]
            held: list[str] = []
            if any(d["body"].get("launched") for d in ds):
                ids = [d["id"] for d in ds]  # a long transcript is read off the event loop
                held = await anyio.to_thread.run_sync(seen, spec, resume_env(cfg, self.home), ids)
            text = prompt_text(payloads, seen=held)
            for d in ds:
                d["body"] = {**d["body"], "resume": rid, "launched": True, "held": d["id"] in held}
            await self._save_all(ds, "started")
            stdin = json.dumps(payloads[0], separators=(",", ":"))
            entry = None
            if self.warm is not None and spec.runtime is Runtime.CLAUDE_CODE:
                entry = await self.warm.entry()
            start = partial(
                launch,
                spec,
                text,
                self._folder(rid),
                home=self.home,
                cfg=cfg,
                timeout_s=self.process_timeout_s,
                stdin_text=stdin,
                mcp_entry=entry,
            )
            await anyio.to_thread.run_sync(start)  # spawning blocks; the daemon keeps serving
            log.info(
                "resuming",
                resume=rid,
                runtime=spec.runtime.value,
                events=len(ds),
                already_in_session=len(held),
            )
        except FedError as exc:
            await self._failed(ds, exc.message)
        except OSError as exc:
            await self._failed(ds, f"{type(exc).__name__}: {exc}")

    async def _check(self, rid: str, ds: list[dict[str, Any]]) -> bool:
        """Settle a started resume if it ended; True while it still runs."""
        folder = self._folder(rid)
        spec = ContinuationSpec.model_validate(ds[-1]["body"]["spec"])
        done = await anyio.to_thread.run_sync(collect, folder)  # file reads, off the loop
        if done is None:
            pid_file = folder / "pid"
            if pid_file.exists() and process_alive(pid := int(pid_file.read_text() or "0")):
                age = self.clock().timestamp() - pid_file.stat().st_mtime
                answered = partial(model_answered, spec, folder)
                if age > self.start_timeout_s and not await anyio.to_thread.run_sync(answered):
                    log.warning("resume got no model answer; stopping it", resume=rid)
                    (folder / "stopped").write_text(
                        f"no answer from the model within {self.start_timeout_s:g} s"
                    )
                    kill(pid)
                return True
            # It may have written its status and ended between the two looks: read it again.
            done = await anyio.to_thread.run_sync(collect, folder)
        if done is None:
            if not folder.exists():
                for d in ds:  # crashed before launch: launch again (nothing reached the session)
                    d["body"] = {k: v for k, v in d["body"].items() if k != "resume"}
                await self._save_all(ds, "pending")
                return False
            # Crashed while launching: it may run (its shell writes the pid), so wait; past the
            # launch timeout it is a failed attempt, and the retry checks the session record
            # before re-sending anything (never a second resume with the same events).
            launching = self.clock().timestamp() - folder.stat().st_mtime < _LAUNCH_S
            if not pid_file.exists() and launching:
                return True
            why = folder / "stopped"
            tails = Outcome(-1, tail_of(folder / "out"), tail_of(folder / "err")).reason()
            reason = (
                why.read_text()
                if why.exists()
                else (
                    "the resume ended without a status"
                    if pid_file.exists()
                    else "the resume's launch was interrupted (no pid recorded)"
                )
            )
            await self._failed(ds, f"{reason}; {tails}")
            return False
        try:
            tools = await anyio.to_thread.run_sync(check_result, spec, folder, done)
        except FedError as exc:
            await self._failed(ds, exc.message)
            return False
        for d in ds:
            d["body"] = {**d["body"], "tools_verified": tools}
        await self._save_all(ds, "delivered")
        log.info("resumed", resume=rid, runtime=spec.runtime.value, events=len(ds))
        return False

    async def deliver(self) -> None:
        busy: set[str] = set()
        started: dict[str, list[dict[str, Any]]] = {}
        for d in await self.store.deliveries(states=("started",)):
            started.setdefault(str(d["body"].get("resume", d["id"])), []).append(d)
        for rid, ds in started.items():
            if await self._check(rid, ds):
                busy.add(str(ds[0]["body"].get("key")))
        now = self.clock().isoformat()
        queues: dict[str, list[dict[str, Any]]] = {}
        for d in await self.store.deliveries(states=("pending",), limit=5000):
            key = str(d["body"].get("key") or f"continuation:{d['continuation_id']}")
            queues.setdefault(key, []).append(d)
        for key, ds in queues.items():
            if key in busy:
                continue  # one resume in flight per session; these ride the next one
            ds.sort(key=lambda x: (int(x["body"].get("seq", 0)), x["id"]))
            if ds[0]["next_at"] > now:
                continue  # the oldest waits out its backoff; later events keep their order
            try:
                spec = ContinuationSpec.model_validate(ds[0]["body"]["spec"])
            except ValidationError as exc:  # recorded by an older fedhpc (no bound session)
                for d in ds:
                    d["attempts"] = self.max_attempts
                    d["body"] = {**d["body"], "last_error": f"unusable continuation: {exc}"[:500]}
                await self._save_all(ds, "dead")
                continue
            if spec.runtime in (Runtime.INBOX, Runtime.WEBHOOK):
                for d in ds:
                    await self._deliver_direct(d, spec)
            else:
                await self._launch(ds)

    def _to_inbox(self, spec: ContinuationSpec, payload: dict[str, Any]) -> None:
        folder = self.home / "inbox"
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        name = spec.inbox or spec.session_id or "default"
        append_line(folder / f"{name}.jsonl", json.dumps(payload, separators=(",", ":")))

    @staticmethod
    async def _post(spec: ContinuationSpec, payload: dict[str, Any], delivery: str) -> None:

        assert spec.url is not None
        try:
            async with httpx2.AsyncClient(timeout=10) as http:
                resp = await http.post(
                    spec.url, json=payload, headers={"Idempotency-Key": delivery}
                )
        except httpx2.HTTPError as exc:
            raise TransientError(f"webhook: {type(exc).__name__}") from exc
        if resp.status_code >= 300:
            raise TransientError(f"webhook answered {resp.status_code}")

    async def redrive(self, ids: list[str] | None) -> list[str]:
        """Dead deliveries (these ids, or all) back to pending with a fresh retry budget."""
        dead = await self.store.deliveries(states=("dead",), limit=5000)
        chosen = [d for d in dead if ids is None or d["id"] in ids]
        for d in chosen:
            d["attempts"] = 0
            d["body"] = {**d["body"], "redriven": int(d["body"].get("redriven", 0)) + 1}
        if chosen:
            await self._save_all(chosen, "pending")
            self.wake.set()
        return [d["id"] for d in chosen]

    async def cycle(self) -> None:
        await self.route()
        await self.deliver()

    async def run(self, stopping: anyio.Event) -> None:
        try:
            while not stopping.is_set():
                try:
                    await self.cycle()
                except Exception:  # a bad delivery is logged; the bridge keeps serving
                    log.exception("bridge cycle failed")
                with anyio.move_on_after(self.poll_s):
                    await self.wake.wait()
                self.wake = anyio.Event()
        finally:  # also when cancelled (the daemon's grace ran out): no warm server is left
            if self.warm is not None:
                await self.warm.stop()  # shielded
