"""The start fedhpc predicted for a task waiting at a scheduler, as data for the dashboard
(pure). The daemon words the why-pending sentence once for every face (`waiting`, from
`fedhpc.ops.pending.pending_note`), with each start in UTC; the page names every time in the
zone the person picked, so it is given each instant and the text the sentence printed for it,
and writes that text in its zone. A hedged task waits at several sites at once: one start per
copy, as the sentence names them."""

from __future__ import annotations

from typing import Any

from fedhpc.ops.pending import predicted_start_at, shown_utc, waiting_copies
from fedhpc.ops.task_views import ResultManifest

__all__ = ["predicted_start"]


def predicted_start(m: ResultManifest) -> dict[str, Any] | None:
    """For a task waiting at a scheduler (submitted, not started) whose placement predicted a
    wait: `copies`, for each attempt it waits on with a predicted start (a hedged task's
    copies, as its sentence names them; the one attempt otherwise), its `n`, `site`,
    `partition`, `at`, the start (ISO 8601, UTC), and `shown`, that start as the daemon's
    sentence prints it (`2026-12-04 22:01:00 UTC`); `at` and `shown` also of the first of
    them. None otherwise."""
    copies = []
    for i, a in enumerate(waiting_copies(m)):
        start = predicted_start_at(m, a, main=i == 0)
        if start is not None:
            where = {"n": a.n, "site": a.site, "partition": a.partition}
            copies.append(where | {"at": start.isoformat(), "shown": shown_utc(start)})
    if not copies:
        return None
    return {"at": copies[0]["at"], "shown": copies[0]["shown"], "copies": copies}
