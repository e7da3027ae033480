"""The compact continuation payload: what woke the agent and what it may do next (pure).

One JSON line per event, each carrying its delivery id: the marker the bridge looks for in the
session's own record before it re-sends anything (a retry never shows an event twice)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

__all__ = [
    "BATCH_BYTES",
    "BATCH_EVENTS",
    "HARD_CAP",
    "SINGLE_CAP",
    "TARGET",
    "batch_size",
    "build_payload",
    "late_payload",
    "nudge_text",
    "prompt_text",
]

SINGLE_CAP = 600  # bytes: a single task's terminal event, as the model sees it
TARGET = 1024  # bytes: what one event's JSON normally stays under
HARD_CAP = 4096  # bytes: never more per event; the rest is behind the result reference
BATCH_EVENTS = 20  # events: never more in one resume; the rest ride the next one, in order
BATCH_BYTES = 8192  # bytes of prompt per resume (an argv element may not pass 128 KiB)

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
    "task.waiting_for_site": [
        "wait: fedhpc places it when the site answers again and resumes you when it ends",
        "to run it elsewhere instead, follow `hint` (replan, or cancel and submit again)",
    ],
    "group.round_terminal": ["get_result(task_id) for each child", "submit_group(...)"],
    "group.stalled_child": ["replan(task_id, exclude_sites=[...])", "cancel(task_id)"],
    "group.site_lost": [
        "wait: the children stay on the site and fedhpc resumes you when the round ends",
        "replan(task_id, exclude_sites=[site]) for a child that has not started (round open)",
        "cancel(task_id) for a child you give up on",
    ],
    "group.waiting_for_site": [
        "wait: fedhpc places the children when the site answers again and resumes you when "
        "the round ends",
        "to run them elsewhere instead, follow `hint` (replan each, or cancel them)",
    ],
    "transfer.succeeded": [
        "read the resource in `result`",
        "submit_task(..., stage_in=[transfer_id]) for the next step",
    ],
    "transfer.failed": ["read the resource in `result`", "move_data(...) again"],
    "task.stage_in_failed": [
        "read `reason`; if there is a `hint`, ask the user to run its command (`fedhpc login`...)",
        "move_data(...) again, then submit_task(..., stage_in=[new transfer_id])",
    ],
    "task.stage_in_blocked": [
        "ask the user to run the command in `hint` (e.g. `fedhpc login`): the copy then goes "
        "on, the task runs, and fedhpc resumes you when it ends",
        "cancel(task_id) if the input is no longer wanted",
    ],
    "transfer.blocked": ["ask the user to run the command in `hint` (e.g. `fedhpc login`)"],
}
_ATTEMPT_KEYS = ("n", "site", "state", "job_id", "runtime_s", "exit_code")
_TAIL = (
    "Read results with fedhpc get_result, then decide the next step. "
    "Do not poll: fedhpc resumes you when something else needs you."
)


def _size(obj: dict[str, Any]) -> int:
    return len(json.dumps(obj, separators=(",", ":")).encode())


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
    }
    for key in ("task_id", "group_id", "transfer_id"):
        if p.get(key) is not None:
            out[key] = p[key]
    if event["subject"] not in out.values():
        out["subject"] = event["subject"]
    out["state"] = p.get("state")
    for key in ("site", "counts", "round", "children"):
        if p.get(key) is not None:
            out[key] = p[key]
    if p.get("task_ids"):  # a group event's children (a few; the group resource has all)
        out["task_ids"] = list(p["task_ids"])[:5]
    if p.get("result") and p["result"] != f"fedhpc://tasks/{event['subject']}":
        out["result"] = p["result"]  # the default reference follows from the subject
    error = p.get("error") or {}
    reason = p.get("reason") or error.get("message")  # a transfer's failure says why too
    if reason:
        out["reason"] = str(reason)[:300]
    hint = p.get("hint") or error.get("hint")
    if hint:  # the fix a person must make, e.g. the exact `fedhpc login --scope ...` command
        out["hint"] = str(hint)[:500]
    if attempts:
        last = attempts[-1]
        out["attempt"] = {k: last[k] for k in _ATTEMPT_KEYS if last.get(k) is not None}
    out["next"] = _NEXT.get(event["kind"], ["get_result(task_id)"])
    if _size(out) > TARGET and "counts" in out:
        out["counts"] = {k: out["counts"][k] for k in list(out["counts"])[:20]}
    if _size(out) > HARD_CAP or _size(out) > TARGET:
        keep = (
            "fedhpc",
            "delivery",
            "event",
            "task_id",
            "group_id",
            "transfer_id",
            "subject",
            "state",
            "hint",
            "next",
        )
        out = {k: out[k] for k in keep if k in out}
    return out


def _line(payload: dict[str, Any]) -> str:
    return json.dumps(payload, separators=(",", ":"))


def prompt_text(
    payloads: Sequence[dict[str, Any]],
    *,
    seen: Sequence[str] = (),
    unreached: Sequence[str] = (),
) -> str:
    """The resumed agent's next user message: one JSON line per event not yet in the session
    (event order), a pointer to those the session already holds (`seen` delivery ids: in a
    turn that did not finish, or, all of them in `unreached`, in one whose fedhpc calls could
    not reach the daemon; a redriven one, `late`, says so), then what to do. A subject's id
    is the argument of get_result."""
    lines: list[str] = []
    fresh = [p for p in payloads if p["delivery"] not in seen]
    if seen:
        how = (
            "whose fedhpc calls could not reach the fedhpc daemon (it was down or restarting; "
            "it answers now)"
            if set(seen) <= set(unreached)
            else "that did not finish (stopped, timed out or crashed)"
        )
        lines.append(
            "fedhpc: the event(s) " + ", ".join(seen) + " in an earlier message of this "
            f"session reached you in a turn {how}: check what that turn already did about "
            "them, then do the rest."
        )
        late = [p["delivery"] for p in payloads if p["delivery"] in seen and p.get("late")]
        if late:  # redriven dead letters: their own `late` is in the message, not re-sent
            lines.append(
                "fedhpc: " + ", ".join(late) + " come late (redriven after their delivery "
                "failed): newer events may have reached you since; check the current state "
                "before acting on them."
            )
    if fresh:
        lines.append("fedhpc events:" if len(fresh) > 1 else "fedhpc event:")
        lines += [_line(p) for p in fresh]
    lines.append(_TAIL)
    return "\n".join(lines)


def batch_size(
    payloads: Sequence[dict[str, Any]],
    *,
    max_events: int = BATCH_EVENTS,
    max_bytes: int = BATCH_BYTES,
) -> int:
    """How many of `payloads` (event order) one resume carries: at most `max_events`, and no
    more than fit in `max_bytes` of prompt; always at least one (an event is <= HARD_CAP)."""
    n = 1
    while n < min(len(payloads), max_events):
        if len(prompt_text(payloads[: n + 1]).encode()) > max_bytes:
            break
        n += 1
    return min(n, len(payloads))


def nudge_text(seen: Sequence[str]) -> str:
    """A retry whose events are all in the session already: point at them, never re-send."""
    return prompt_text([], seen=seen)


def late_payload(
    payload: dict[str, Any],
    *,
    event_at: str | None,
    redriven_at: str,
    after: Sequence[str] = (),
) -> dict[str, Any]:
    """A redriven dead letter's payload: it says the event is from `event_at`, delivered late
    after a failure, and which of the session's later events (`after`, delivery ids, event
    order) reached the agent before it, so an older state is never taken for the newest."""
    late: dict[str, Any] = {
        "event_at": event_at,
        "redriven_at": redriven_at,
        "note": "delivered late, after its delivery failed: newer events may have reached "
        "you already; check the current state before acting",
    }
    if after:
        late["after"] = list(after[:5])
        if len(after) > 5:
            late["after_more"] = len(after) - 5
    out = {k: v for k, v in payload.items() if k != "late"}
    out["late"] = late
    return out
