"""The I/O side of wait estimator (b): ask each site's scheduler when chosen candidates would start.

All `sbatch --test-only` calls for one site go in ONE remote call (`command.batch`); sites run
concurrently. The result is plain data that `placement.place(..., estimates=...)` consumes, so
placement itself stays pure and replayable."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, runtime_checkable

import anyio
import structlog

from fedhpc.adapters.command import Command, CommandResult, batch, split_batch
from fedhpc.adapters.site import SiteAdapter
from fedhpc.adapters.transports.base import TransportError
from fedhpc.domain.job import JobSpec, Shape
from fedhpc.errors import FedError
from fedhpc.placement.context import shape_key
from fedhpc.placement.trace import CandidateTrace, DecisionTrace

__all__ = ["EstimateRequest", "requests_from_trace", "scheduler_estimates"]

log = structlog.get_logger(__name__)

# Feed each script to sbatch on stdin inside the batched bash script; sbatch answers on stderr,
# which `batch` discards per section, so fold it into stdout here.
_TEST_ONLY = 'printf "%s" "$1" | sbatch --test-only 2>&1'


@dataclass(frozen=True, slots=True)
class EstimateRequest:
    """One candidate to ask the scheduler about."""

    site: str
    partition: str
    account: str | None
    shape: Shape
    qos: str | None = None


@runtime_checkable
class _TestOnly(Protocol):
    def test_only_command(self, script: str) -> Command: ...

    def parse_test_only(self, result: CommandResult) -> object: ...


def requests_from_trace(trace: DecisionTrace, *, top: int = 8) -> list[EstimateRequest]:
    """The best `top` feasible candidates of a first (pure) pass, to refine with estimator (b)."""
    chosen: list[CandidateTrace] = [c for c in trace.candidates if c.feasible][:top]
    return [EstimateRequest(c.site, c.partition, c.account, c.shape, c.qos) for c in chosen]


def _section_command(adapter: SiteAdapter, dialect: _TestOnly, req: EstimateRequest) -> Command:
    spec = JobSpec(
        name="fedhpc-estimate",
        command=("true",),
        partition=req.partition,
        account=req.account,
        qos=req.qos,
        shape=req.shape,
    )
    inner = dialect.test_only_command(adapter.render(spec))
    return Command(("sh", "-c", _TEST_ONLY, "sh", inner.stdin or ""), env=inner.env)


async def _site_estimates(
    adapter: SiteAdapter, reqs: Sequence[EstimateRequest], timeout_s: float
) -> dict[tuple[str, str, str], datetime]:
    dialect = adapter.dialect
    if not isinstance(dialect, _TestOnly):
        return {}  # PBS/LSF have no dry-run start estimate: the caller falls back
    sections = {f"t{i}": _section_command(adapter, dialect, r) for i, r in enumerate(reqs)}
    try:
        result = await adapter.transport.run(batch(sections, timeout_s=timeout_s))
    except TransportError as exc:
        log.warning("test-only failed", site=adapter.name, error=exc.message)
        return {}
    parts = split_batch(result.stdout)
    out: dict[tuple[str, str, str], datetime] = {}
    for i, req in enumerate(reqs):
        section = parts.get(f"t{i}")
        if section is None:
            continue
        answer = CommandResult(section.returncode, section.stdout, "")
        try:
            prediction = dialect.parse_test_only(answer)
        except FedError as exc:
            log.info(
                "test-only rejected", site=req.site, partition=req.partition, error=exc.message
            )
            continue
        start = getattr(prediction, "start", None)
        if isinstance(start, datetime):
            out[(req.site, req.partition, shape_key(req.shape))] = start
    return out


async def scheduler_estimates(
    requests: Iterable[EstimateRequest],
    adapters: Mapping[str, SiteAdapter],
    *,
    timeout_s: float = 30.0,
) -> dict[tuple[str, str, str], datetime]:
    """(site, partition, shape key) -> predicted start, from one batched remote call per site.
    Sites without an adapter, without a dry-run command, or that fail are simply absent."""
    by_site: dict[str, list[EstimateRequest]] = {}
    for req in requests:
        if req.site in adapters:
            by_site.setdefault(req.site, []).append(req)
    out: dict[tuple[str, str, str], datetime] = {}

    async def one(site: str) -> None:
        out.update(await _site_estimates(adapters[site], by_site[site], timeout_s))

    async with anyio.create_task_group() as tg:
        for site in sorted(by_site):
            tg.start_soon(one, site, name=f"test-only:{site}")
    return out
