"""`next`: what the agent should do now, for every tool and every state, from one function.

An answer is an instruction: "end your turn" only when a continuation will wake the agent,
"read the result" only when there is one, and `replan` only where it works (a task that has
not started, or an unschedulable one; it refuses other finished tasks)."""

from __future__ import annotations

from typing import Literal

from fedhpc.domain.job import TERMINAL

__all__ = ["HintTool", "blocked_hint", "next_hint", "unreadable_hint"]

HintTool = Literal["submit_task", "submit_group", "get_result", "replan", "cancel", "group"]

_WAIT = "End your turn now: fedhpc resumes you with the outcome. Do not poll."
# get_result/replan/group may come from a session other than the submitter's: say whom.
_WAIT_OWNER = "Still live: fedhpc resumes the session that submitted it when it ends. Do not poll."
_NO_WAKE = (
    "No continuation is bound to this session, so nothing will resume it: call {read} when "
    "you want the outcome (list_events shows when it ends)."
)
_BLOCKED = (
    "fedhpc cannot resume this session now: {why} Do not end your turn waiting for it: call "
    "{read} when you want the outcome (list_events shows when it ends). Once the resume runtime "
    "is fixed (`fedhpc deliveries check`), `fedhpc deliveries retry` delivers what it missed."
)
_ENDED = {
    "completed": "Completed: read it now with {read}.",
    "failed": "Failed: read why now with {read} (stderr tail, exit code, reasons).",
    "timeout": "Hit its wall-time limit: read it with {read}, then submit again with a larger "
    "envelope.wall_time.",
    "cancelled": "Cancelled: nothing more will happen.",
    "unschedulable": "No site can run it as asked (see reasons): replan it with a changed "
    "envelope or exclude_sites, or submit a new task (another fixed_site, fallback).",
}
_CHILD_UNSCHEDULABLE = (
    "No site can run it as asked (see reasons): replan it with a changed envelope or "
    "exclude_sites while its group's round is open; once the round has ended, submit_group "
    "again with a changed envelope."
)
_READ = {
    "completed": "Completed: preview is the end of its stdout; outputs lists the files not "
    "shown whole.",
    "failed": "Failed: see the stderr tail, exit_code and reasons; fix the cause and submit again.",
    "timeout": "Hit its wall-time limit: submit again with a larger envelope.wall_time.",
}


def unreadable_hint(state: str, site: str, why: str, read: str) -> str:
    """`next` of a get_result that could not read an ended task's output on `site`, by `why`:
    "offline" (the last probe found it down), "unprobed" (configured, not probed yet since
    the daemon started), or "unknown" (not an enabled site of this daemon: removed from
    config.toml or `enabled = false`; waiting never helps)."""
    head = f"{state.capitalize()}, but its output is on {site}"
    if why == "unknown":
        return (
            f"{head}, which is not an enabled site of this daemon (nothing on the site is "
            f"lost): enable [sites.{site}] in config.toml (add it back, or set enabled = true) "
            f"and run `fedhpc daemon restart`, then call {read} again."
        )
    if why == "unprobed":
        return (
            f"{head}, which fedhpc has not probed yet since the daemon started (nothing is "
            f"lost): call {read} again once inspect_federation lists {site}."
        )
    return (
        f"{head}, which does not answer now (nothing is lost): call {read} again once "
        f"inspect_federation shows {site} ok."
    )


def _waiting_hint(sites: str, resumes: bool, told: bool, read: str, move: str) -> str:
    """A queued task that only offline sites could run: it waits for them, not for the agent.
    `told`: its continuation wakes on the wait itself (one registered before fedhpc had that
    event does not list it)."""
    head = (
        f"Queued, waiting for {sites} (offline): fedhpc places it when {sites} answers again."
        if "," not in sites
        else f"Queued, waiting for {sites} (offline): fedhpc places it when one answers again."
    )
    if resumes and told:
        then = (
            " Do not poll: fedhpc resumes the session that submitted it when it ends, and once "
            "if it is still waiting after a while."
        )
    elif resumes:
        then = (
            " fedhpc resumes the session that submitted it when it ends, not while it waits "
            f"(its continuation does not wake on waits for a site): call {read} to check on it."
        )
    else:
        then = f" Nothing will resume this session: call {read} when you want the outcome."
    return head + then + (f" {move}" if move else "")


def blocked_hint(why: str, read: str) -> str:
    """`next` when a continuation exists but the daemon cannot start its runtime now."""
    return _BLOCKED.format(why=why.rstrip(".") + ".", read=read)


def next_hint(
    tool: HintTool,
    state: str,
    *,
    resumes: bool,
    ref: str = "",
    cancelled_now: bool = False,
    whole: bool = False,
    child: bool = False,
    blocked: str = "",
    offline: str = "",
    waiting: str = "",
    move: str = "",
    told: bool = False,
) -> str:
    """The `next` line of an answer.

    `state` is a task state (or a group state: running, completed, failed, cancelled); any
    state that is not terminal counts as live, whatever new ones the submit pipeline adds.
    `resumes`: a continuation will wake this agent when the work ends. `ref` names what to
    read (a task id); `cancelled_now`: this cancel call stopped live work; `whole`: a
    get_result answer shows all of the task's output (no file left to read); `child`: the
    task is a group child (replan works only while its round is open); `blocked`: a
    continuation exists but the daemon cannot start its runtime now (why, with the fix), so
    nothing will wake the agent and it must not wait; `offline`: a get_result answer could not
    read the output, because this site does not answer now (other reasons: `unreadable_hint`);
    `waiting`: the offline sites a queued task waits for, with `move`, how to run it elsewhere
    instead (`orchestrator.offline_wait`), and `told`, whether a continuation wakes on the
    wait itself (its events list the wait's event)."""
    group = tool in {"submit_group", "group"}
    read = (
        f"get_result(task_id={ref!r})"
        if ref and not group
        else "get_result(task_id) for each child"
        if group
        else "get_result(task_id)"
    )
    if tool == "cancel":
        if cancelled_now:
            return (
                "Cancelled: fedhpc stopped it (and its job, if one was queued or running); "
                "nothing more will happen."
            )
        if state in TERMINAL:
            return f"Nothing was cancelled: it had already ended ({state}). Read it with {read}."
    if state not in TERMINAL:
        if blocked:
            return blocked_hint(blocked, read)
        if waiting:
            return _waiting_hint(waiting, resumes, told, read, move)
        if tool == "get_result":
            return _WAIT_OWNER if resumes else "Still running: call get_result again later."
        if resumes:
            return _WAIT if tool in {"submit_task", "submit_group"} else _WAIT_OWNER
        return _NO_WAKE.format(read=read)
    if child and state == "unschedulable":
        return _CHILD_UNSCHEDULABLE
    if tool == "get_result":
        if offline and state in _READ:
            return unreadable_hint(state, offline, "offline", read)
        if whole and state == "completed":
            return "Completed: preview is all of its output."
        return _READ.get(state) or _ENDED[state].format(read=read)
    if group and state == "failed":
        return f"Some children failed: read them with {read}."
    return _ENDED[state].format(read=read)
