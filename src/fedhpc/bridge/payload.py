"""The compact continuation payload: what woke the agent and what it may do next (pure)."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["HARD_CAP", "TARGET", "build_payload", "prompt_text"]

TARGET = 2048  # bytes: what a payload normally stays under
HARD_CAP = 4096  # bytes: never more; the rest is behind the result reference

_NEXT = {
    "task.terminal": ["get_result(task_id)", "submit_task(...) for the next step"],
    "task.retry_exhausted": [
        "get_result(task_id, preview='stderr')",
        "submit_task(...) again with a fixed command or envelope",
    ],
    "task.unschedulable": [
        "replan(task_id, envelope=..., exclude_sites=[...]) to place it again",
        "draft_envelope(...) to relax the envelope",
    ],
    "task.site_lost": [
        "wait: it stays on the site and fedhpc resumes you when it ends",
        "replan(task_id, exclude_sites=[site]) if it has not started",
        "cancel(task_id), then submit_task(...)",
    ],
    "group.round_terminal": ["get_result(task_id) for each child", "submit_group(...)"],
    "group.stalled_child": ["replan(task_id, exclude_sites=[...])", "cancel(task_id)"],
    "transfer.succeeded": [
        "read the resource in `result`",
        "submit_task(..., stage_in=[transfer_id]) for the next step",
    ],
    "transfer.failed": ["read the resource in `result`", "move_data(...) again"],
    "task.stage_in_failed": [
        "read `reason`; if there is a `hint`, ask the user to run its command (`fedhpc login`...)",
        "move_data(...) again, then submit_task(..., stage_in=[new transfer_id])",
    ],
    "transfer.blocked": ["ask the user to run the command in `hint` (e.g. `fedhpc login`)"],
}


def build_payload(
    event: dict[str, Any],
    attempts: list[dict[str, Any]],
    *,
    delivery_id: str,
) -> dict[str, Any]:
    """From an event and a summary of its task's attempts (newest last). Only ids, states,
    sites and times: records never hold credentials, and nothing free-form is copied whole."""
    p = event.get("payload", {})
    out: dict[str, Any] = {
        "fedhpc": "continuation",
        "delivery": delivery_id,
        "event": event["kind"],
        "event_id": event["id"],
        "subject": event["subject"],
        "state": p.get("state"),
        "result": p.get("result"),
    }
    for key in ("task_id", "group_id", "transfer_id", "site", "counts", "round"):
        if p.get(key) is not None:
            out[key] = p[key]
    if p.get("reason"):
        out["reason"] = str(p["reason"])[:300]
    hint = p.get("hint") or (p.get("error") or {}).get("hint")
    if hint:  # the fix a person must make, e.g. the exact `fedhpc login --scope ...` command
        out["hint"] = str(hint)[:500]
    out["attempts"] = [
        {k: a.get(k) for k in ("n", "site", "partition", "state", "job_id", "wait_s",
                               "runtime_s", "exit_code") if a.get(k) is not None}
        for a in attempts[-3:]
    ]  # fmt: skip
    out["next"] = _NEXT.get(event["kind"], ["get_result(task_id)"])
    while len(json.dumps(out, separators=(",", ":"))) > TARGET and out["attempts"]:
        out["attempts"].pop(0)
    if len(json.dumps(out, separators=(",", ":"))) > HARD_CAP:
        out = {k: out[k] for k in ("fedhpc", "delivery", "event", "event_id", "subject",
                                   "state", "result")}  # fmt: skip
    return out


def prompt_text(payload: dict[str, Any]) -> str:
    """The payload as the resumed agent's next user message."""
    body = json.dumps(payload, separators=(",", ":"), sort_keys=True)
    return (
        f"fedhpc event {payload['event']} for {payload['subject']}: {body}\n"
        "Read the result with the fedhpc get_result tool, then decide the next step. "
        "Do not poll: fedhpc resumes you again when something needs a decision."
    )
