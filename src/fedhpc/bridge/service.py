"""The resume bridge: routes new events to their continuations (cursor, consumed ids and the
delivery records in one transaction) and delivers each at least once, with bounded retries,
a dead-letter state, and no second resume after a daemon restart."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import structlog

from fedhpc.bridge.payload import build_payload
from fedhpc.bridge.runtimes import check_result, collect, launch, process_alive
from fedhpc.errors import FedError
from fedhpc.ops.continuations import ContinuationSpec, Runtime
from fedhpc.store import Event, Store

__all__ = ["Bridge"]

log = structlog.get_logger(__name__)


def _utcnow() -> datetime:
    return datetime.now(UTC)


class Bridge:
    """A daemon service. `route()` turns events into deliveries; `deliver()` runs them."""

    CONSUMER = "bridge"

    def __init__(
        self,
        store: Store,
        home: Path,
        *,
        clock: Callable[[], datetime] = _utcnow,
        max_attempts: int = 5,
        backoff_s: float = 2.0,
        process_timeout_s: float = 900.0,
        poll_s: float = 1.0,
    ) -> None:
        self.store = store
        self.home = home
        self.clock = clock
        self.max_attempts = max_attempts
        self.backoff_s = backoff_s
        self.process_timeout_s = process_timeout_s
        self.poll_s = poll_s
        self.wake = anyio.Event()

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
            str(e.payload["group_id"]) for e in events if e.payload.get("group_id")
        }
        conts = await self.store.continuations_for(sorted(subjects))
        now = self.clock()
        made = 0
        plans: list[tuple[str, Event, dict[str, Any], dict[str, Any]]] = []
        for e in events:
            if e.id in done:
                continue  # consumed before a crash: never routed twice
            for c in conts:
                spec = ContinuationSpec.model_validate(c["body"])
                if e.kind not in spec.events:
                    continue
                if c["subject"] not in (e.subject, e.payload.get("group_id")):
                    continue
                did = f"d{e.seq}-{c['id']}"
                payload = build_payload(e.model_dump(mode="json"), await self._attempts(e),
                                        delivery_id=did)  # fmt: skip
                plans.append((did, e, c, payload))
        async with self.store.transaction() as tx:
            for did, e, c, payload in plans:
                await tx.put_delivery(
                    did, event_id=e.id, continuation_id=c["id"], state="pending", attempts=0,
                    next_at=now, at=now,
                    body={"payload": payload, "runtime": c["runtime"], "spec": c["body"]},
                )  # fmt: skip
                made += 1
            await tx.mark_consumed(self.CONSUMER, [e.id for e in events], at=now)
            await tx.set_cursor(self.CONSUMER, events[-1].seq, at=now)
        return made

    # -- delivery ---------------------------------------------------------------------------
    async def _save(self, d: dict[str, Any], state: str, *, next_at: datetime | None = None,
                    error: str | None = None) -> None:  # fmt: skip
        body = dict(d["body"])
        if error is not None:
            body["last_error"] = error[:500]
        async with self.store.transaction() as tx:
            await tx.put_delivery(
                d["id"], event_id=d["event_id"], continuation_id=d["continuation_id"],
                state=state, attempts=d["attempts"], next_at=next_at or self.clock(),
                body=body, at=self.clock(),
            )  # fmt: skip

    async def _failed(self, d: dict[str, Any], error: str) -> None:
        d["attempts"] += 1
        if d["attempts"] >= self.max_attempts:
            log.warning("delivery dead", delivery=d["id"], error=error)
            await self._save(d, "dead", error=error)
            return
        delay = min(300.0, self.backoff_s * 2 ** (d["attempts"] - 1))
        await self._save(d, "pending", next_at=self.clock() + timedelta(seconds=delay),
                         error=error)  # fmt: skip

    def _folder(self, d: dict[str, Any]) -> Path:
        return self.home / "deliveries" / f"{d['id']}-{d['attempts']}"

    async def _session(self, spec: ContinuationSpec) -> str | None:
        if spec.session_id:
            return spec.session_id
        if spec.runtime is Runtime.CLAUDE_CODE and spec.cwd:
            return await self.store.session(spec.runtime.value, spec.cwd)
        return None

    async def _start(self, d: dict[str, Any]) -> None:
        spec = ContinuationSpec.model_validate(d["body"]["spec"])
        payload: dict[str, Any] = d["body"]["payload"]
        try:
            if spec.runtime is Runtime.INBOX:
                self._to_inbox(spec, payload)
                await self._save(d, "delivered")
            elif spec.runtime is Runtime.WEBHOOK:
                await self._post(spec, payload, d["id"])
                await self._save(d, "delivered")
            else:
                session = await self._session(spec)
                # "started" is committed before the process exists: after a crash, a started
                # delivery with an rc file is finished, one with a live pid is waited for.
                await self._save(d, "started")
                launch(spec, session, payload, self._folder(d), home=self.home,
                       timeout_s=self.process_timeout_s)  # fmt: skip
                log.info("resuming", delivery=d["id"], runtime=spec.runtime.value)
        except FedError as exc:
            await self._failed(d, exc.message)
        except OSError as exc:
            await self._failed(d, f"{type(exc).__name__}: {exc}")

    async def _check(self, d: dict[str, Any]) -> None:
        folder = self._folder(d)
        spec = ContinuationSpec.model_validate(d["body"]["spec"])
        done = collect(folder)
        if done is None:
            pid_file = folder / "pid"
            if pid_file.exists() and process_alive(int(pid_file.read_text() or "0")):
                return  # still resuming
            if not pid_file.exists() and not folder.exists():
                await self._save(d, "pending")  # crashed before launch: launch now
                return
            await self._failed(d, "the resume process ended without a status")
            return
        status, err = done
        try:
            check_result(spec, folder, status, err)
        except FedError as exc:
            await self._failed(d, exc.message)
            return
        await self._save(d, "delivered")
        log.info("resumed", delivery=d["id"], runtime=spec.runtime.value)

    async def deliver(self) -> None:
        now = self.clock().isoformat()
        for d in await self.store.deliveries(states=("started",)):
            await self._check(d)
        for d in await self.store.deliveries(states=("pending",)):
            if d["next_at"] <= now:
                await self._start(d)

    def _to_inbox(self, spec: ContinuationSpec, payload: dict[str, Any]) -> None:
        folder = self.home / "inbox"
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        name = spec.inbox or spec.session_id or "default"
        with (folder / f"{name}.jsonl").open("a") as fh:
            fh.write(json.dumps(payload, separators=(",", ":")) + "\n")

    @staticmethod
    async def _post(spec: ContinuationSpec, payload: dict[str, Any], delivery: str) -> None:
        import httpx2

        from fedhpc.errors import TransientError

        assert spec.url is not None
        try:
            async with httpx2.AsyncClient(timeout=10) as http:
                resp = await http.post(spec.url, json=payload,
                                       headers={"Idempotency-Key": delivery})  # fmt: skip
        except httpx2.HTTPError as exc:
            raise TransientError(f"webhook: {type(exc).__name__}") from exc
        if resp.status_code >= 300:
            raise TransientError(f"webhook answered {resp.status_code}")

    async def cycle(self) -> None:
        await self.route()
        await self.deliver()

    async def run(self, stopping: anyio.Event) -> None:
        while not stopping.is_set():
            try:
                await self.cycle()
            except Exception:  # a bad delivery is logged; the bridge keeps serving
                log.exception("bridge cycle failed")
            with anyio.move_on_after(self.poll_s):
                await self.wake.wait()
            self.wake = anyio.Event()
