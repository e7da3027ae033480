"""The resume bridge: routes new events to their continuations (cursor, consumed ids and the
delivery records in one transaction) and delivers them: at most one resume in flight per
session, events that arrive meanwhile coalesced into the next resume in event order, a retry
never re-sending what the session already holds, bounded retries, a dead-letter state, and no
second resume after a daemon restart. Routing is `routing`, where a started resume stands is
`settle`, inbox and webhook deliveries are `direct`."""

from __future__ import annotations

import json
import secrets
import socket
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path

import anyio
import structlog
from pydantic import ValidationError

from fedhpc.bridge.delivery import Delivery
from fedhpc.bridge.direct import post, to_inbox
from fedhpc.bridge.group import KILL_GRACE_S
from fedhpc.bridge.outcome import check_result
from fedhpc.bridge.payload import batch_size, late_payload, prompt_text
from fedhpc.bridge.reach import unreached
from fedhpc.bridge.records import seen
from fedhpc.bridge.routing import SESSIONS, route_events
from fedhpc.bridge.runtimes import binary, launch, resume_env
from fedhpc.bridge.serve_host import ServeHost
from fedhpc.bridge.settle import Stand, standing
from fedhpc.bridge.warm import DAEMON_WAIT_S, WarmServer
from fedhpc.domain.config import ResumeConfig
from fedhpc.errors import FedError
from fedhpc.logs import isolated
from fedhpc.ops.continuations import ContinuationSpec, Runtime
from fedhpc.store import Store

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
        max_attempts: int = 4,
        backoff_s: float = 5.0,
        process_timeout_s: float = 1800.0,
        start_timeout_s: float = 120.0,
        poll_s: float = 1.0,
        resume: Callable[[], ResumeConfig] = ResumeConfig,
        warm_mcp: bool = False,
        kill_grace_s: float = KILL_GRACE_S,
        daemon_wait_s: float = DAEMON_WAIT_S,
    ) -> None:
        self.store = store
        self.home = home
        self.clock = clock
        self.max_attempts = max_attempts
        self.backoff_s = backoff_s
        self.process_timeout_s = process_timeout_s
        self.start_timeout_s = start_timeout_s
        self.kill_grace_s = kill_grace_s  # a stopped resume's group: SIGTERM, then SIGKILL
        self.poll_s = poll_s
        self.resume = resume  # read at each launch: a fixed config needs no daemon restart
        self.warm = WarmServer(home, daemon_wait_s=daemon_wait_s) if warm_mcp else None
        self.host = ServeHost(home) if warm_mcp else None  # Codex's stdio server, preloaded
        self.wake = anyio.Event()

    def blocker(self, runtime: str) -> str:
        """Why a resume of `runtime` cannot start now ("" when it can): the `[resume]` config
        does not load, or the agent CLI is not where it would be run. Read at each answer, so a
        fixed config counts at once."""
        try:
            kind = Runtime(runtime)
            if kind not in SESSIONS:
                return ""  # a `command` continuation names its own program
            cfg = self.resume().get(runtime)
            binary(kind, cfg, resume_env(cfg, self.home))
        except FedError as exc:
            return f"{exc.message}. {exc.hint}" if exc.hint else exc.message
        except ValueError:  # an unknown runtime: the spec's own validation reports it
            return ""
        return ""

    async def route(self) -> int:
        """New events after the cursor -> pending deliveries, committed with the cursor."""
        return await route_events(self.store, self.CONSUMER, self.clock)

    # -- records ----------------------------------------------------------------------------
    async def _deliveries(self, *states: str, limit: int = 1000) -> list[Delivery]:
        return [
            Delivery.from_row(r) for r in await self.store.deliveries(states=states, limit=limit)
        ]

    async def _save_all(
        self, ds: list[Delivery], state: str, *, next_at: datetime | None = None
    ) -> None:
        """One transaction for a resume's deliveries: they change state together."""
        async with self.store.transaction() as tx:
            for d in ds:
                await tx.put_delivery(
                    d.id,
                    event_id=d.event_id,
                    continuation_id=d.continuation_id,
                    state=state,
                    attempts=d.attempts,
                    next_at=next_at or self.clock(),
                    body=d.body.dump(),
                    at=self.clock(),
                )

    async def _failed(self, ds: list[Delivery], error: str) -> None:
        now = self.clock()
        for d in ds:
            d.attempts += 1
            d.body.last_error = error[:2000]
            if d.attempts >= self.max_attempts:
                log.warning("delivery dead", delivery=d.id, error=error[:300])
                await self._save_all([d], "dead")
                continue
            delay = min(300.0, self.backoff_s * 2 ** (d.attempts - 1))
            log.info("delivery retry", delivery=d.id, in_s=delay, error=error[:200])
            await self._save_all([d], "pending", next_at=now + timedelta(seconds=delay))

    def _folder(self, resume_id: str) -> Path:
        return self.home / "deliveries" / resume_id

    def _launched_in(self, rid: str, d: Delivery) -> Path | None:
        """The folder of the resume `rid` of `d`: where it was recorded at launch (another
        daemon's home, on a shared store), else this home's; None when it runs on another
        host, whose processes and files this daemon cannot see."""
        if d.body.host is not None and d.body.host != socket.gethostname():
            return None
        return Path(d.body.folder) if d.body.folder else self._folder(rid)

    # -- delivery ---------------------------------------------------------------------------
    async def _deliver_direct(self, d: Delivery, spec: ContinuationSpec) -> None:
        payload = d.body.payload
        try:
            if spec.runtime is Runtime.INBOX:
                to_inbox(self.home, spec, payload)
            else:
                await post(spec, payload, d.id)
        except FedError as exc:
            await self._failed([d], exc.message)
            return
        await self._save_all([d], "delivered")

    async def _launch(self, ds: list[Delivery]) -> None:
        """One resume for the session's oldest pending deliveries (event order, at most
        BATCH_EVENTS and BATCH_BYTES of prompt), marked `started`
        (committed before the process exists: after a crash, a started resume with an rc file
        is finished, one with a live pid is waited for)."""
        spec = ContinuationSpec.model_validate(ds[-1].body.spec)
        if spec.runtime not in SESSIONS:
            ds = ds[:1]  # a command gets one payload on stdin
        else:  # capped: the rest wait (the session is busy) and ride the next resume, in order
            ds = ds[: batch_size([d.body.payload for d in ds])]
        rid = f"r{ds[0].body.seq}-{secrets.token_hex(3)}"
        try:
            cfg = self.resume().get(spec.runtime.value)
            payloads = [d.body.payload for d in ds]
            held: list[str] = []
            if any(d.body.launched for d in ds):
                ids = [d.id for d in ds]  # a long transcript is read off the event loop
                held = await anyio.to_thread.run_sync(seen, spec, resume_env(cfg, self.home), ids)
            unreached_ids = [d.id for d in ds if d.body.unreached]
            text = prompt_text(payloads, seen=held, unreached=unreached_ids)
            host, folder = socket.gethostname(), str(self._folder(rid))
            for d in ds:
                d.body.resume, d.body.launched, d.body.held = rid, True, d.id in held
                d.body.folder, d.body.host = folder, host
            await self._save_all(ds, "started")
            stdin = json.dumps(payloads[0], separators=(",", ":"))
            entry = None
            if self.warm is not None and spec.runtime is Runtime.CLAUDE_CODE:
                entry = await self.warm.entry()
            if self.host is not None and spec.runtime is Runtime.CODEX:
                await self.host.ensure()  # else the resume starts its own `fedhpc serve`
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

    async def _check(self, rid: str, ds: list[Delivery]) -> bool:
        """Settle a started resume if it ended; True while it still runs."""
        folder = self._launched_in(rid, ds[0])
        if folder is None:  # never a second resume beside one that may run: a failed try
            why = f"its resume was started by the daemon on {ds[0].body.host}; its outcome "
            await self._failed(ds, why + "cannot be read on this host")
            return False
        spec = ContinuationSpec.model_validate(ds[-1].body.spec)
        at = self.clock().timestamp()
        look = partial(
            standing,
            spec,
            folder,
            now=at,
            start_timeout_s=self.start_timeout_s,
            grace_s=self.kill_grace_s,
        )
        st = await anyio.to_thread.run_sync(look)  # file reads and a process look, off the loop
        if st.stand is Stand.RUNNING:
            return True
        if st.stand is Stand.UNLAUNCHED:
            for d in ds:  # crashed before launch: launch again (nothing reached the session)
                d.body = d.body.without("resume")
            await self._save_all(ds, "pending")
            return False
        if st.outcome is None:
            await self._failed(ds, st.reason)
            return False
        try:
            tools = await anyio.to_thread.run_sync(check_result, spec, folder, st.outcome)
        except FedError as exc:
            await self._failed(ds, exc.message)
            return False
        why = await anyio.to_thread.run_sync(unreached, spec, folder)
        if why:
            await self._unreached(ds, why)
            return False
        for d in ds:
            d.body.tools_verified = tools
        await self._save_all(ds, "delivered")
        log.info("resumed", resume=rid, runtime=spec.runtime.value, events=len(ds))
        return False

    async def _unreached(self, ds: list[Delivery], why: str) -> None:
        """The resumed turn ran but could not reach the daemon: its events are in the session,
        yet the agent never read what they point at. Delivered again, once (the retry points
        at them, never re-sends them); a second such turn makes them dead letters."""
        for d in ds:
            if d.body.unreached:
                d.attempts += 1
                d.body.last_error = (
                    f"{why}, in its delivery and in its one re-delivery. Once the daemon runs "
                    f"(`fedhpc daemon status`): fedhpc deliveries retry {d.id}"
                )
                log.warning("delivery dead: its resumes never reached fedhpc", delivery=d.id)
                await self._save_all([d], "dead")
            else:
                d.body.unreached, d.body.last_error = 1, f"{why}; delivered again"
                log.warning("resume did not reach fedhpc; delivering again", delivery=d.id)
                await self._save_all([d], "pending")

    async def deliver(self) -> None:
        busy: set[str] = set()
        started: dict[str, list[Delivery]] = {}
        for d in await self._deliveries("started"):
            started.setdefault(str(d.body.resume or d.id), []).append(d)
        for rid, ds in started.items():
            key = str(ds[0].body.key)
            busy.add(key)  # until its check says it ended: a check that raises keeps it busy
            with isolated("checking a resume failed", resume=rid, delivery=ds[0].id):
                if not await self._check(rid, ds):
                    busy.discard(key)
        now = self.clock().isoformat()
        queues: dict[str, list[Delivery]] = {}
        for d in await self._deliveries("pending", limit=5000):
            queues.setdefault(d.queue, []).append(d)
        for key, ds in queues.items():
            if key in busy:
                continue  # one resume in flight per session; these ride the next one
            with isolated("delivering failed", delivery=ds[0].id):  # never the others'
                await self._deliver_queue(ds, now)

    async def _deliver_queue(self, ds: list[Delivery], now: str) -> None:
        """One session's pending deliveries, oldest first (one resume carries several)."""
        ds.sort(key=lambda x: (x.body.seq, x.id))
        if ds[0].next_at > now:
            return  # the oldest waits out its backoff; later events keep their order
        try:
            spec = ContinuationSpec.model_validate(ds[0].body.spec)
        except ValidationError as exc:  # recorded by an older fedhpc (no bound session)
            for d in ds:
                d.attempts = self.max_attempts
                d.body.last_error = f"unusable continuation: {exc}"[:500]
            await self._save_all(ds, "dead")
            return
        if spec.runtime in (Runtime.INBOX, Runtime.WEBHOOK):
            for d in ds:
                with isolated("delivering failed", delivery=d.id):
                    await self._deliver_direct(d, spec)
        else:
            await self._launch(ds)

    async def redrive(self, ids: list[str] | None) -> list[str]:
        """Dead deliveries (these ids, or all) back to pending with a fresh retry budget; each
        payload says it is late: the event's time, and the session's events delivered since."""
        dead = await self._deliveries("dead", limit=5000)
        chosen = [d for d in dead if ids is None or d.id in ids]
        delivered = await self._deliveries("delivered", limit=5000) if chosen else []
        now = self.clock().isoformat()
        for d in chosen:
            d.attempts = 0
            body = d.body.without("unreached")  # its one re-delivery again
            event = await self.store.event(d.event_id)
            after = sorted(
                (x.body.seq, x.id)
                for x in delivered
                if x.body.key == body.key and x.body.seq > body.seq
            )
            body.payload = late_payload(
                body.payload,
                event_at=event.created_at.isoformat() if event else None,
                redriven_at=now,
                after=[i for _, i in after],
            )
            body.redriven += 1
            d.body = body
        if chosen:
            await self._save_all(chosen, "pending")
            self.wake.set()
        return [d.id for d in chosen]

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
            if self.host is not None:
                await self.host.stop()  # shielded
