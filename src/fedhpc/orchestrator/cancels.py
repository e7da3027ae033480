"""Cancelling jobs without holding the orchestrator's lock: a cancel is owed under the lock
(`owe`), sent after it (`send`, `cancel_attempts`), and recorded as taken under it again; one
still owed (no job id yet, the site offline or silent, the call refused) is asked again by a
later cycle."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime

import anyio
import structlog

from fedhpc.adapters.site import SiteAdapter
from fedhpc.collector import Collector
from fedhpc.globus_auth.people import acting_for
from fedhpc.logs import isolated
from fedhpc.orchestrator.book import TaskBook
from fedhpc.orchestrator.liveness import online
from fedhpc.orchestrator.people import by_owner, per_person
from fedhpc.orchestrator.records import AttemptRecord

__all__ = ["CANCEL_BATCH", "Cancels"]

log = structlog.get_logger(__name__)

CANCEL_BATCH = 100  # job ids in one scheduler cancel call (one command line)


class Cancels:
    """The scheduler cancels fedhpc owes, sent outside the orchestrator's lock."""

    def __init__(
        self,
        book: TaskBook,
        collector: Collector,
        adapters: Mapping[str, SiteAdapter],
        *,
        clock: Callable[[], datetime],
        lock: anyio.Lock,
    ) -> None:
        self.book = book
        self.collector = collector
        self.adapters = adapters
        self.clock = clock
        self.lock = lock  # the orchestrator's: held to record, never to send a cancel
        self._cancelling: set[tuple[str, int]] = set()  # (task, attempt) being sent

    def owe(self, a: AttemptRecord) -> None:
        """Under the lock: `a`'s job is to be cancelled. Only marked: `send` sends it
        after the lock is released, so a slow, hung or rate-limited scheduler never holds the
        orchestrator's lock (and with it every other session's work)."""
        a.cancel_pending = True

    async def send(self, atts: Sequence[AttemptRecord]) -> None:
        """Never under the lock: the cancels `atts` owe, sent at once (`cancel_attempts`);
        those a scheduler took are recorded as no longer owed, under the lock. The rest stay
        owed in the store: each cycle's `Adaptation.adapt_pending` finds them again (`owed`),
        until their site answers."""
        owed = [
            a
            for a in atts
            if a.cancel_pending
            and a.job_id is not None
            and (a.task_id, a.n) not in self._cancelling
            and online(self.collector, a.site)
        ]
        if not owed:
            return
        keys = {(a.task_id, a.n) for a in owed}
        self._cancelling |= keys
        try:
            await self.cancel_attempts(owed)
        finally:
            self._cancelling -= keys
        taken = {(a.task_id, a.n) for a in owed if not a.cancel_pending}
        if not taken:
            return
        async with self.lock:
            stored = []
            for task_id in sorted({k[0] for k in taken}):
                with isolated("recording a cancel failed", task=task_id):
                    for a in await self.book.load_attempts(task_id):
                        if (task_id, a.n) in taken and a.cancel_pending:
                            a.cancel_pending = False
                            stored.append(a)
            async with self.book.store.transaction() as tx:
                await self.book.save_attempts(tx, *stored, at=self.clock())

    async def cancel_attempts(self, atts: Sequence[AttemptRecord]) -> None:
        """Cancel many at once: one scheduler call per site for up to `CANCEL_BATCH` of its
        jobs, sites concurrently (one slow site delays no other), each marked for a later
        cancel where its site did not take it (no job id yet, offline, or the call failed: the
        next cycle asks again)."""
        by_site: dict[str, list[AttemptRecord]] = {}
        for a in atts:
            if a.job_id is None or not online(self.collector, a.site):
                a.cancel_pending = True
            else:
                by_site.setdefault(a.site, []).append(a)

        async def one_site(site: str, some: list[AttemptRecord]) -> None:
            # At a per-person site, each person's jobs are cancelled as that person.
            mine = per_person(self.collector.sites.get(site))
            people = await by_owner(self.book, some) if mine else {}
            for owner, theirs in (people or {None: some}).items():
                for i in range(0, len(theirs), CANCEL_BATCH):
                    batch = theirs[i : i + CANCEL_BATCH]
                    try:
                        with acting_for(owner):
                            await self.adapters[site].cancel([str(a.job_id) for a in batch])
                        done = True
                    except Exception as exc:  # one of them may have ended meanwhile
                        log.info("cancel failed", site=site, jobs=len(batch), error=str(exc)[:300])
                        done = False
                    for a in batch:
                        a.cancel_pending = not done

        async with anyio.create_task_group() as tg:
            for site, some in by_site.items():
                tg.start_soon(one_site, site, some)
