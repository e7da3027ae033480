"""What request handlers may use: the store (read), the collector, the orchestrator, the
transfer service and resume bridge when they run, and the start time."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import anyio

from fedhpc.bridge import Bridge
from fedhpc.collector import Collector
from fedhpc.daemon.timings import RequestTimes
from fedhpc.ops.inspect import FederationView, InspectRequest, inspect_federation
from fedhpc.orchestrator import Orchestrator
from fedhpc.store import Store
from fedhpc.transfer.service import TransferService

__all__ = ["DaemonState"]


class DaemonState:
    """What request handlers may use: the store (read), the collector, the start time."""

    def __init__(
        self,
        store: Store,
        collector: Collector,
        started_at: datetime,
        orchestrator: Orchestrator,
    ) -> None:
        self.store = store
        self.collector = collector
        self.started_at = started_at
        self.orchestrator = orchestrator
        self.transfers: TransferService | None = None
        self.bridge: Bridge | None = None
        self.archive_path: Path | None = None  # where archived events go (the daemon's home)
        self.request_times = RequestTimes()  # how long the REST answers took (GET /v1/health)
        self.landed = anyio.Event()  # set (and replaced) when events may have landed
        self.stopping = anyio.Event()  # set at stop: long polls answer what they have

    def stop(self) -> None:
        """The daemon stops: every long poll answers now rather than hold the stop up."""
        self.stopping.set()
        self.events_landed()

    def events_landed(self) -> None:
        """Wake the readers waiting for new events (GET /v1/events?wait_s=)."""
        landed, self.landed = self.landed, anyio.Event()
        landed.set()

    def view(self, request: InspectRequest | None = None) -> FederationView:
        return inspect_federation(
            self.collector.latest,
            self.collector.sites,
            now=datetime.now(UTC),
            refresh_s=self.collector.refresh_s,
            request=request,
        )
