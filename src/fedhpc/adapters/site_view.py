"""What a site is (the site adapter's probe, its billing weights between reads, the storage
roots of its login shell) and paths under those roots."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING

import structlog

from fedhpc.adapters.command import Command, CommandResult, batch, split_batch
from fedhpc.adapters.dialects import Dialect
from fedhpc.adapters.dialects.base import OCCASIONAL_SECTION
from fedhpc.adapters.dialects.busy import SchedulerBusy
from fedhpc.adapters.liveness import ControllerDown, ControllerSilent
from fedhpc.adapters.site_errors import StorageUnread, WorkdirFailed
from fedhpc.adapters.transports.base import TransportError
from fedhpc.domain.config import Site
from fedhpc.domain.site import Health, SiteState

__all__ = ["BILLING_EVERY_S", "SiteView"]

log = structlog.get_logger(__name__)

# The probe's occasional section (Slurm's partition settings: billing weights) is sent with the
# first probe, after a probe that found the site offline, and then at most this often: one
# command more per 10 minutes, not one more per probe (a center asks for a probe a minute).
BILLING_EVERY_S = 600.0
# A storage root given as an environment variable of the login shell (`$SCRATCH`, `$WORK/x`: TACC
# sets them per user). The name is checked here and expanded remotely with `${!name}`: nothing
# from a profile is ever run.
_VAR_ROOT = re.compile(r"^\$([A-Za-z_][A-Za-z0-9_]*)(/.*)?$")
_EXPAND = r'for n in "$@"; do printf "%s=%s\n" "$n" "${!n}"; done'


class SiteView:
    """The probe and the storage roots of `SiteAdapter` (a mixin: the site, its dialect, the
    clock and the remote calls are the adapter's)."""

    site: Site
    dialect: Dialect
    _clock: Callable[[], datetime]
    roots: dict[str, str] | None
    _roots_error: str
    _roots_tried: float
    billing_every_s: float
    _billing_read: float | None
    _weights: dict[str, tuple[tuple[str, float], ...]]

    if TYPE_CHECKING:

        @property
        def name(self) -> str: ...

        @property
        def login(self) -> str: ...

        def _deadline(self, command: Command) -> Command: ...

        async def _run(self, command: Command, kind: str) -> CommandResult: ...

        async def _gated(
            self, command: Command, kind: str, *, ping_s: float | None = ...
        ) -> CommandResult: ...

    async def ping_alone(self, ping_s: float) -> ControllerDown | None:
        """The scheduler's ping with nothing behind it (one command): why the controller did
        not answer within `ping_s` (`ControllerSilent`: it said nothing), or None. Beside an
        observation that takes long, to tell a hung controller from a slow answer."""
        try:
            await self._gated(Command(("true",)), "ping", ping_s=ping_s)  # counted 2: 1 sent
        except ControllerDown as exc:
            return exc
        except TransportError:  # busy, or unreachable: the probe judges it
            return None
        return None

    async def probe(self, *, timeout_s: float = 30.0) -> SiteState:
        """Every probe command in ONE remote call, behind the scheduler's ping (a dead
        controller is found in one ping, not after the probe's retries); a transport failure
        or a controller down means OFFLINE (a silent ping raises `ControllerSilent`, judged by
        the collector). Stamped with when the answer came: what was
        observed, when it was (a site back online is never dated before it answered)."""
        sections = self.dialect.probe_sections(self.site.profile, self.login)
        started = time.monotonic()
        read, skipped = self._billing_read, False
        if read is not None and started - read < self.billing_every_s:
            skipped = sections.pop(OCCASIONAL_SECTION, None) is not None
        try:
            result = await self._gated(batch(sections, timeout_s=timeout_s), "probe")
        except (SchedulerBusy, ControllerSilent):
            # Shedding load: the collector backs off. A ping unanswered in time: the
            # collector asks again at once. Neither is a lost site yet.
            raise
        except TransportError as exc:
            log.warning("probe failed", site=self.name, error=exc.message)
            self._billing_read = None  # the collector keeps nothing of an offline site
            return SiteState(
                site=self.name, health=Health.OFFLINE, collected_at=self._clock(), error=exc.message
            )
        at = self._clock()
        state = self.dialect.parse_probe(
            split_batch(result.stdout), self.site.profile, self.login, at
        )
        state = self._billing(state, sections, started, skipped)
        if self.roots is None:
            await self.read_roots()
        return state.model_copy(update={"latency_s": round(time.monotonic() - started, 3)})

    def _billing(
        self, state: SiteState, sections: dict[str, Command], started: float, skipped: bool
    ) -> SiteState:
        """`state` with the billing weights read last when this probe did not ask for them;
        a probe that asked and was answered is the new last reading."""
        if state.health is Health.OFFLINE:
            self._billing_read = None  # the collector keeps nothing of an offline site
            return state
        if OCCASIONAL_SECTION in sections and "billing" not in state.unread:
            self._billing_read = started
            self._weights = {p.name: p.billing_weights for p in state.partitions}
            return state
        if not skipped:
            return state
        parts = tuple(
            p.model_copy(update={"billing_weights": self._weights.get(p.name, ())})
            for p in state.partitions
        )
        return state.model_copy(update={"partitions": parts})

    async def read_roots(self, *, unless_within_s: float = 0.0) -> None:
        """Read the `$NAME` storage roots from the login shell (one call; none without such
        roots). A failed call leaves them unread (the next probe reads them again); no second
        call within `unless_within_s` of the last one."""
        names = sorted(
            {m.group(1) for r in self.site.profile.storage if (m := _VAR_ROOT.match(r.path))}
        )
        if not names:
            self.roots = {}
            return
        if time.monotonic() - self._roots_tried < unless_within_s:
            return
        self._roots_tried = time.monotonic()
        try:
            command = Command(("bash", "-c", _EXPAND, "fedhpc", *names))
            result = await self._run(self._deadline(command), "roots")
        except TransportError as exc:
            self._roots_error = exc.message
        else:
            if result.returncode == 0:
                lines = result.stdout.splitlines()
                found = {k: v for k, _, v in (line.partition("=") for line in lines)}
                self.roots = {n: found.get(n, "").rstrip("/") for n in names}
                return
            self._roots_error = result.stderr.strip()[-200:] or f"exit {result.returncode}"
        log.warning("storage roots unread", site=self.name, error=self._roots_error)

    def root_path(self, path: str) -> str:
        """A profile storage root as a path at the site: `$NAME[/rest]` expanded as the login
        shell sets NAME. Raises `WorkdirFailed` when it cannot be (NAME unset there, or not a
        name), `StorageUnread` while the site has not answered the read; nothing is created."""
        m = _VAR_ROOT.match(path)
        if m is None:
            if path.startswith("$"):
                raise WorkdirFailed(
                    f"{WorkdirFailed.PREFIX} on {self.name}: storage root {path!r} is not "
                    "$NAME or $NAME/path",
                    hint="Fix the root's path in the site profile, or set `workdir` for the site.",
                )
            return path
        name, rest = m.group(1), m.group(2) or ""
        if self.roots is None:
            raise StorageUnread(
                f"{StorageUnread.PREFIX} of {self.name} (${name}): {self._roots_error}",
                hint=f"fedhpc asks again with the next probe; `fedhpc doctor {self.name}` shows "
                "whether the site answers.",
            )
        if self.roots.get(name, "").startswith("/"):
            return self.roots[name] + rest
        raise WorkdirFailed(
            f"{WorkdirFailed.PREFIX} on {self.name}: storage root {path}: "
            f"${name} is not set in the login environment",
            hint=f"Set `workdir` for {self.name} in config.toml, or check with "
            f"`fedhpc doctor {self.name}`.",
        )
