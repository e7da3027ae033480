"""The wait placement would predict now on every partition for three reference requests
(1 GPU, 1 whole node, 4 GPUs): `place` itself on the snapshot with every partition scored, so
each wait and its source are the decision's own, and a partition that cannot run a request
says why (its rules' failures), never a number."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import replace

from pydantic import BaseModel, ConfigDict

from fedhpc.domain.envelope import IntRange, ResourceEnvelope
from fedhpc.domain.site import PartitionSpec
from fedhpc.placement.context import shape_key
from fedhpc.placement.errors import method_of
from fedhpc.placement.inputs import PlacementInputs
from fedhpc.placement.place import place
from fedhpc.placement.trace import CandidateTrace

__all__ = ["REFERENCE_WALL_S", "REQUESTS", "OutlookRow", "outlook", "reference_envelope"]

REQUESTS = ("1 GPU", "1 node", "4 GPUs")
# Each reference request asks for an hour, or a partition's cap when that is shorter (at least
# the envelope's default 10 minutes): the wait estimators do not read the wall time.
REFERENCE_WALL_S = 3600


class OutlookRow(BaseModel):
    """One partition x one reference request: the wait placement predicts now and where it
    came from (`source` as the decision writes it, `method` the estimator it names), or
    `wait_s` None and `why` (the rules it fails) when the partition cannot run it."""

    model_config = ConfigDict(frozen=True)

    site: str
    partition: str
    request: str
    wait_s: float | None
    p90_s: float | None
    source: str
    method: str
    why: str
    shape: str


def _fixed(n: int) -> IntRange:
    return IntRange(min=n, max=n)


def reference_envelope(request: str, spec: PartitionSpec | None = None) -> ResourceEnvelope:
    """The envelope of a reference request: `1 GPU` and `4 GPUs` on one node with one CPU;
    `1 node` is every GPU and CPU of one node of `spec` (CPUs only where it has no GPU)."""
    wall = {"min": 600, "max": REFERENCE_WALL_S}
    if request == "1 node":
        if spec is None:
            raise ValueError("a whole node is a partition's own: name the partition")
        acc = spec.node.accelerator
        gpus = acc.count if acc is not None else 0
        return ResourceEnvelope(
            gpus=_fixed(gpus), cpus=_fixed(spec.node.cpus), nodes=_fixed(1), wall_time=wall
        )
    count = {"1 GPU": 1, "4 GPUs": 4}.get(request)
    if count is None:
        raise ValueError(f"not a reference request: {request!r} (one of {', '.join(REQUESTS)})")
    return ResourceEnvelope(gpus=_fixed(count), cpus=_fixed(1), nodes=_fixed(1), wall_time=wall)


def _row(request: str, site: str, partition: str, found: list[CandidateTrace]) -> OutlookRow:
    """The partition's best candidate as the decision ranked it (feasible ones come first, by
    their sort key); without one, the first rejected candidate's failed rules."""
    best = next((c for c in found if c.feasible and c.estimates is not None), None)
    if best is not None and best.estimates is not None:
        e = best.estimates
        finite = math.isfinite(e.wait_s)
        return OutlookRow(
            site=site,
            partition=partition,
            request=request,
            wait_s=e.wait_s if finite else None,
            p90_s=e.wait_p90_s if finite and math.isfinite(e.wait_p90_s) else None,
            source=e.wait_source,
            method=method_of(e.wait_source),
            why="" if finite else "no estimate (no live state)",
            shape=shape_key(best.shape),
        )
    why = "; ".join(found[0].failures()) if found else "not evaluated"
    shape = shape_key(found[0].shape) if found else ""
    return OutlookRow(
        site=site,
        partition=partition,
        request=request,
        wait_s=None,
        p90_s=None,
        source="",
        method="",
        why=why or "not feasible",
        shape=shape,
    )


def _rows(
    request: str, env: ResourceEnvelope, inputs: PlacementInputs, only: set[tuple[str, str]]
) -> list[OutlookRow]:
    decision = place(env, inputs)
    found: dict[tuple[str, str], list[CandidateTrace]] = defaultdict(list)
    for c in decision.trace.candidates:
        found[(c.site, c.partition)].append(c)
    return [_row(request, s, p, found.get((s, p), [])) for s, p in sorted(only)]


def outlook(inputs: PlacementInputs) -> list[OutlookRow]:
    """Every partition of `inputs.sites` x each of `REQUESTS`, sorted by site, partition and
    request. One decision per request (a whole node: one per distinct node shape), each
    scoring every partition (`prune=False`). No task budget: a site's own credit still
    counts. Pure: what the daemon passes (snapshot, history, errors, ledger) is all it reads."""
    inputs = replace(inputs, prune=False, task_budget=None)
    specs = {(s, p.name): p for s, site in inputs.sites.items() for p in site.profile.partitions}
    rows: list[OutlookRow] = []
    for request in REQUESTS:
        if request != "1 node":
            rows += _rows(request, reference_envelope(request), inputs, set(specs))
            continue
        by_node: dict[tuple[int, int], set[tuple[str, str]]] = defaultdict(set)
        for key, spec in specs.items():
            acc = spec.node.accelerator
            by_node[(acc.count if acc else 0, spec.node.cpus)].add(key)
        for keys in by_node.values():
            env = reference_envelope(request, specs[min(keys)])
            env = env.model_copy(update={"sites_include": tuple(sorted({s for s, _ in keys}))})
            rows += _rows(request, env, inputs, keys)
    order = {r: i for i, r in enumerate(REQUESTS)}
    return sorted(rows, key=lambda r: (r.site, r.partition, order[r.request]))
