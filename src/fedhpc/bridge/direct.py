"""The continuations delivered in place, without a process: an inbox file line, a webhook."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx2

from fedhpc.errors import TransientError
from fedhpc.inbox import append_line
from fedhpc.ops.continuations import ContinuationSpec

__all__ = ["post", "to_inbox"]


def to_inbox(home: Path, spec: ContinuationSpec, payload: dict[str, Any]) -> None:
    """One JSON line in `<home>/inbox/<name>.jsonl` (the inbox, else the session, named)."""
    folder = home / "inbox"
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    name = spec.inbox or spec.session_id or "default"
    append_line(folder / f"{name}.jsonl", json.dumps(payload, separators=(",", ":")))


async def post(spec: ContinuationSpec, payload: dict[str, Any], delivery: str) -> None:
    """POST the payload to the webhook, the delivery id as its Idempotency-Key; anything but a
    2xx answer is a transient failure (retried)."""
    assert spec.url is not None
    try:
        async with httpx2.AsyncClient(timeout=10) as http:
            resp = await http.post(spec.url, json=payload, headers={"Idempotency-Key": delivery})
    except httpx2.HTTPError as exc:
        raise TransientError(f"webhook: {type(exc).__name__}") from exc
    if resp.status_code >= 300:
        raise TransientError(f"webhook answered {resp.status_code}")
