"""Planning a transfer: the request's idempotency key, and both references resolved and the
backend chosen before anything is stored or moved (pure: no I/O)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from datetime import datetime

from fedhpc.domain.config import Site
from fedhpc.ops.data import MoveDataRequest
from fedhpc.transfer.records import TransferRecord
from fedhpc.transfer.refs import choose_backend, resolve

__all__ = ["plan_transfer", "request_key"]


def request_key(req: MoveDataRequest) -> str:
    if req.idempotency_key:
        return req.idempotency_key
    body = req.model_dump_json(exclude={"continuation"})  # who waits is not what moves
    return "sha256:" + hashlib.sha256(body.encode()).hexdigest()


def plan_transfer(
    req: MoveDataRequest, sites: Mapping[str, Site], *, transfer_id: str, now: datetime
) -> TransferRecord:
    """Resolve both references and pick the backend; every mistake is a typed error here,
    before anything is stored or moved."""
    src = resolve(req.source, sites)
    dst_site = sites.get(req.destination.split(":", 1)[0])
    backend = choose_backend(sites[src.site], dst_site) if dst_site else None
    dst = resolve(req.destination, sites, need_collection=backend == "globus")
    if backend == "globus":
        src = resolve(req.source, sites, need_collection=True)
    assert backend is not None  # resolve() refused an unknown destination site
    trace = (
        f"source {req.source} -> {src.site}:{src.path}"
        + (f" (collection {src.collection_id})" if src.collection_id else ""),
        f"destination {req.destination} -> {dst.site}:{dst.path}"
        + (f" (collection {dst.collection_id})" if dst.collection_id else ""),
        f"backend {backend}: "
        + (
            "both sites are local-test sites on this machine"
            if backend == "local"
            else "Globus Transfer between the two collections"
        ),
    )
    return TransferRecord(
        id=transfer_id,
        idempotency_key=request_key(req),
        mode=req.mode,
        source_ref=req.source,
        destination_ref=req.destination,
        source=src,
        destination=dst,
        options=req,
        label=req.label or "",
        backend=backend,
        created_at=now,
        trace=trace,
    )
