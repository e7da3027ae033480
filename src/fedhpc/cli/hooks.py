"""`fedhpc hook ...`: Claude Code hooks, and `fedhpc deliveries` (the resume bridge's log)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import anyio

from fedhpc.daemon.settings import DaemonSettings
from fedhpc.ops.continuations import SessionReport

__all__ = ["add_parser", "session_start", "user_prompt_submit"]


async def _report(report: SessionReport) -> None:
    from fedhpc.client import DaemonClient, DaemonUnavailable, start_daemon

    settings = DaemonSettings.from_env()
    async with DaemonClient(settings, timeout_s=10) as client:
        try:
            await client.report_session(report)
        except DaemonUnavailable:
            start_daemon(settings)
            await client.wait_until_up(20)
            await client.report_session(report)


def session_start(stdin: str) -> int:
    """SessionStart: tell the daemon {session_id, cwd}; the MCP server never sees them."""
    report = SessionReport.model_validate_json(stdin)
    anyio.run(_report, report)
    return 0


def user_prompt_submit(stdin: str, home: Path) -> str | None:
    """UserPromptSubmit: inject events waiting in this session's inbox, then empty it."""
    data = json.loads(stdin or "{}")
    names = [str(data.get("session_id") or ""), "default"]
    lines: list[str] = []
    for name in names:
        path = home / "inbox" / f"{name}.jsonl"
        if name and path.exists():
            lines += path.read_text().splitlines()
            path.unlink()
    if not lines:
        return None
    context = "fedhpc events since your last turn:\n" + "\n".join(lines[-20:])
    return json.dumps(
        {
            "hookSpecificOutput": {
                "hookEventName": "UserPromptSubmit",
                "additionalContext": context,
            }
        }
    )


def _hook(args: argparse.Namespace) -> int:
    stdin = sys.stdin.read()
    if args.event == "session-start":
        return session_start(stdin)
    out = user_prompt_submit(stdin, DaemonSettings.from_env().home)
    if out:
        print(out)
    return 0


async def _deliveries(states: tuple[str, ...]) -> list[str]:
    from fedhpc.client import DaemonClient

    async with DaemonClient(DaemonSettings.from_env()) as client:
        rows = await client.deliveries(states)
    return [
        f"{d.id:<24} {d.runtime.value:<11} {d.state:<9} tries={d.attempts} "
        f"{d.payload_bytes:>5}B {d.last_error or ''}".rstrip()
        for d in rows
    ]


def _list(args: argparse.Namespace) -> int:
    for line in anyio.run(_deliveries, tuple(args.state)):
        print(line)
    return 0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    h = sub.add_parser("hook", help="Claude Code hook handlers (read the hook JSON on stdin)")
    h.add_argument("event", choices=["session-start", "user-prompt-submit"])
    h.set_defaults(func=_hook)
    d = sub.add_parser("deliveries", help="the resume bridge's deliveries (dead letters too)")
    d.add_argument("--state", action="append", default=[],
                   choices=["pending", "started", "delivered", "dead"])  # fmt: skip
    d.set_defaults(func=_list)
