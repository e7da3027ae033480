"""`fedhpc hook ...`: Claude Code hooks; `fedhpc deliveries ...`: the resume bridge's log,
dead-letter redrive, and a dry run of each configured resume runtime."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
from pydantic import ValidationError

from fedhpc.client.errors import DaemonUnavailable
from fedhpc.client.relay_bindings import BINDINGS, bind_from_hook
from fedhpc.client.start import start_daemon
from fedhpc.inbox import take_lines
from fedhpc.ops.continuations import ToolBinding
from fedhpc.settings import fedhpc_home
from fedhpc.settings.daemon import DaemonSettings
from fedhpc.terminal import for_terminal

if TYPE_CHECKING:
    from fedhpc.client.daemon_client import DaemonClient

__all__ = ["BIND_TOOLS", "add_parser", "post_tool_use", "pre_tool_use", "user_prompt_submit"]

# The tools whose calls start work that a continuation wakes the session about.
BIND_TOOLS = ("submit_task", "submit_group", "move_data")


def _client(settings: DaemonSettings, timeout_s: float | None = None) -> DaemonClient:
    # startup: the client carries the whole contract's models (0.3 s of CPU), which the
    # user-prompt-submit and post-tool-use hooks, run at every prompt or call, never need
    from fedhpc.client.daemon_client import DaemonClient

    return DaemonClient(settings, timeout_s=timeout_s)


async def _report(binding: ToolBinding) -> None:

    settings = DaemonSettings.from_env()
    async with _client(settings, timeout_s=10) as client:
        try:
            await client.report_binding(binding)
        except DaemonUnavailable:
            start_daemon(settings)
            await client.wait_until_up(20)
            await client.report_binding(binding)


def pre_tool_use(stdin: str) -> int:
    """PreToolUse (matcher `mcp__fedhpc__...`): tell the daemon which session makes this tool
    call; the MCP server sees the same `tool_use_id` and binds the submit to that session.
    Never blocks the call: on any failure the submit answer says the session is not bound."""
    try:
        binding = ToolBinding.model_validate_json(stdin)
    except ValidationError as exc:
        print(
            f"fedhpc hook pre-tool-use: unusable hook input: {exc.errors()[0]['msg']}",
            file=sys.stderr,
        )
        return 0
    name = binding.tool_name or ""
    if not name.startswith("mcp__fedhpc__"):
        return 0
    try:
        anyio.run(_report, binding)
    except Exception as exc:  # the tool call goes on; its answer says it is not bound
        print(f"fedhpc hook pre-tool-use: {type(exc).__name__}: {exc}", file=sys.stderr)
    return 0


def post_tool_use(stdin: str, folder: Path) -> int:
    """PostToolUse (matcher `mcp__fedhpc__...`), for `fedhpc relay`: record which session
    made the work a submit returned, so the relay resumes that session for its events. Never
    blocks anything: a failure is said on stderr."""
    try:
        bind_from_hook(stdin, folder)
    except (ValueError, ValidationError, OSError) as exc:
        print(f"fedhpc hook post-tool-use: {type(exc).__name__}: {exc}", file=sys.stderr)
    return 0


INBOX_SHOWN = 20  # newest events injected into one prompt; the count of the rest is said


def user_prompt_submit(stdin: str, home: Path) -> str | None:
    """UserPromptSubmit: inject events waiting in this session's inbox, then empty it."""
    data = json.loads(stdin or "{}")
    names = [str(data.get("session_id") or ""), "default"]
    lines: list[str] = []
    for name in names:
        if name:  # taken whole (renamed first): an event appended meanwhile is never lost
            lines += take_lines(home / "inbox" / f"{name}.jsonl")
    if not lines:
        return None
    shown = lines[-INBOX_SHOWN:]
    context = "fedhpc events since your last turn:\n" + "\n".join(shown)
    if len(lines) > len(shown):  # never dropped without a word: say where the rest are
        context += (
            f"\n({len(lines) - len(shown)} earlier event(s) not shown: list_events has them all)"
        )
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
    if args.event == "pre-tool-use":
        return pre_tool_use(stdin)
    if args.event == "post-tool-use":
        return post_tool_use(stdin, fedhpc_home() / "relay" / BINDINGS)
    if args.event == "session-start":
        print(
            "fedhpc hook session-start is no longer used: sessions are bound at submit by "
            "`fedhpc hook pre-tool-use` (docs/continuation.md); remove it.",
            file=sys.stderr,
        )
        return 0
    out = user_prompt_submit(stdin, DaemonSettings.from_env().home)
    if out:
        print(out)
    return 0


# -- fedhpc deliveries ------------------------------------------------------------------------
async def _deliveries(states: tuple[str, ...]) -> list[dict[str, Any]]:

    async with _client(DaemonSettings.from_env()) as client:
        rows = await client.deliveries(states)
    return [d.model_dump(mode="json") for d in rows]


def _list(args: argparse.Namespace) -> int:
    rows = anyio.run(_deliveries, tuple(args.state))
    if args.json:
        print(json.dumps({"deliveries": rows}, indent=2))
        return 0
    for d in rows:
        tools = {True: " tools=ok", False: " tools=MISSING"}.get(d["tools_verified"], "")
        print(
            f"{d['id']:<28} {d['runtime']:<11} {d['state']:<9} tries={d['attempts']} "
            f"{d['payload_bytes']:>4}B {for_terminal(d['event'] or '')}{tools}".rstrip()
        )
        if d["last_error"] and d["state"] != "delivered":  # a resume command's own stderr
            print(f"    reason: {for_terminal(d['last_error'])}")
    return 0


async def _retry(ids: list[str], all_dead: bool) -> dict[str, list[str]]:

    async with _client(DaemonSettings.from_env()) as client:
        return await client.retry_deliveries(ids, all_dead=all_dead)


def _retry_cmd(args: argparse.Namespace) -> int:
    if not args.ids and not args.all_dead:
        print("name delivery ids, or pass --all-dead", file=sys.stderr)
        return 2
    out = anyio.run(_retry, list(args.ids), args.all_dead)
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        for i in out["retried"]:
            print(f"retrying {i}")
        for i in out["not_dead"]:
            print(f"{i}: not a dead delivery (unknown, pending or delivered)", file=sys.stderr)
    return 1 if out["not_dead"] else 0


def _check_cmd(args: argparse.Namespace) -> int:
    # startup: hooks run on every agent tool call; the runtime check (~1 s) only for `check`
    from fedhpc.bridge.check import check_runtimes

    reports = check_runtimes(DaemonSettings.from_env().home, tuple(args.runtime))
    if args.json:
        print(json.dumps({"runtimes": reports}, indent=2))
    else:
        for r in reports:
            print(f"{r['runtime']:<11} {'ok' if r['ok'] else 'PROBLEM'}  {r['detail']}")
            for fix in r["fix"]:
                print(f"    fix: {fix}")
            for note in r.get("notes", []):
                print(f"    note: {note}")
    return 0 if all(r["ok"] for r in reports) else 1


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    h = sub.add_parser("hook", help="Claude Code hook handlers (read the hook JSON on stdin)")
    h.add_argument(
        "event", choices=["pre-tool-use", "post-tool-use", "user-prompt-submit", "session-start"]
    )
    h.set_defaults(func=_hook)
    d = sub.add_parser("deliveries", help="the resume bridge's deliveries (dead letters too)")
    d.add_argument(
        "--state", action="append", default=[], choices=["pending", "started", "delivered", "dead"]
    )
    d.add_argument("--json", action="store_true", help="as JSON")
    d.set_defaults(func=_list)
    ds = d.add_subparsers(dest="action")
    ls = ds.add_parser("list", help="list deliveries (the default)")
    ls.add_argument(
        "--state", action="append", default=[], choices=["pending", "started", "delivered", "dead"]
    )
    ls.add_argument("--json", action="store_true", help="as JSON")
    ls.set_defaults(func=_list)
    r = ds.add_parser("retry", help="redrive dead deliveries after fixing their cause")
    r.add_argument("ids", nargs="*", help="delivery ids")
    r.add_argument("--all-dead", action="store_true", help="every dead delivery")
    r.add_argument("--json", action="store_true", help="as JSON")
    r.set_defaults(func=_retry_cmd)
    c = ds.add_parser(
        "check", help="dry-run each configured resume runtime; report what is missing"
    )
    c.add_argument("--runtime", action="append", default=[], choices=["claude-code", "codex"])
    c.add_argument("--json", action="store_true", help="as JSON")
    c.set_defaults(func=_check_cmd)
