"""Jobs the sites' last probes may not show yet: dispatched since (`Claim`) or ended since
(`Ended`). The ledger built from them corrects the snapshot for the next decisions."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from fedhpc.collector import Collector
from fedhpc.domain.job import Shape
from fedhpc.placement import Ledger

__all__ = ["ENDED_MARGIN_S", "Claim", "Claims", "Ended"]

# Clock skew and the probe's own duration: a job that ended within this of the probe's start
# may already be missing from it, so it is not taken off (the next probe shows it).
ENDED_MARGIN_S = 5.0


@dataclass(slots=True)
class Claim:
    """A job dispatched that its site's last probe may not show: kept until a probe that
    started after the scheduler accepted it (`done`), so a job whose `sbatch` was still in
    flight while `squeue` ran is never left out of the user's job count."""

    at: datetime
    site: str
    partition: str
    account: str | None
    shape: Shape
    charge: float
    done: datetime | None = None  # when the submit call returned (None: still in flight)


@dataclass(frozen=True, slots=True)
class Ended:
    """A job of ours that ended (scheduler's end time) at a partition: while the site's last
    probe still counts it among the user's jobs, the ledger takes it off again, so work held
    by a per-user limit is released at the next control cycle, not the next probe."""

    site: str
    partition: str
    at: datetime


class Claims:
    """The claims and ends not yet in a probe; `ledger()` drops those a probe now shows."""

    def __init__(self, collector: Collector) -> None:
        self.collector = collector
        self.dispatched: list[Claim] = []
        self.ended: list[Ended] = []

    def end(self, ended: Ended) -> None:
        """A job of ours ended. Those a probe has shown ended since are dropped here too, not
        only when a placement builds a ledger: with nothing queued, none is built for as long
        as jobs keep ending."""
        self.ended = [e for e in self.ended if self._counted(e)]
        self.ended.append(ended)

    def drop(self, claim: Claim) -> None:
        """The job never reached a queue."""
        self.dispatched = [c for c in self.dispatched if c is not claim]

    def ledger(self) -> Ledger:
        """Claims of jobs dispatched after their site's last probe; older ones are dropped."""
        latest = self.collector.latest
        self.dispatched = [
            c
            for c in self.dispatched
            if c.site not in latest or c.done is None or c.done >= latest[c.site].collected_at
        ]
        ledger = Ledger()
        for c in self.dispatched:
            ledger.claim(c.site, c.partition, c.account, c.shape, c.charge)
        self.ended = [e for e in self.ended if self._counted(e)]
        for e in self.ended:
            ledger.release(e.site, e.partition)
        return ledger

    def _counted(self, e: Ended) -> bool:
        """Whether the site's last probe surely ran before the job ended (so counts it)."""
        state = self.collector.latest.get(e.site)
        if state is None:
            return False
        probed = state.collected_at.timestamp() + (state.latency_s or 0.0) + ENDED_MARGIN_S
        return e.at.timestamp() >= probed
