"""Economy of the agent loop: tool calls and bytes the model reads for "submit a job, be
resumed, read its output", and the same for a four-child group.

A scripted agent drives `fedhpc serve` over stdio with the real MCP client (legacy mode, as
Claude Code and Codex do) against a real `fedhpc daemon` on the local federation. It submits,
ends its turn (the MCP session closes), and is resumed by a `command`-runtime continuation that
stores the payload; then it reads the result with one `get_result`. Measured:

- tool calls from submit to having the output (target 2: submit, get_result);
- bytes of tool-result text the model reads (the text content of each answer), submit and
  result together (target <= 512 B for a short output, issue 36; <= 2,048 B for a group's
  submit and one child's result);
- the continuation payload (the JSON the resume carries, and the whole resume prompt);
- tools/list: what the model reads of it (names, descriptions, input schemas; goal <= 6 KB)
  and the whole tool list (budget 16 KB; the wire line is `test_mcp_wire.py`'s).

A third loop is a client with no continuation at all, at 2026-07-28 with the Tasks extension
(docs/mcp.md): raw JSON-RPC lines over stdio, so the bytes are the wire's. It submits, opens
`subscriptions/listen` for the task and reads until the terminal `notifications/tasks`:
the task handle plus that notification is everything it receives (no tasks/get, no
get_result); the text the model reads is the result's text.

Run: .venv/bin/python benchmarks/economy.py [--sites slurm|process] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters

from fedhpc.bridge.payload import prompt_text
from fedhpc.client.daemon_client import DaemonClient
from fedhpc.settings.daemon import DaemonSettings

ENVELOPE = {"cpus": {"min": 1, "max": 1}, "wall_time": {"min": "5m"}}
# The resumed "agent": one file per resume, holding the payload it got on stdin.
RESUME = 'f=$(mktemp "$1/resume.XXXXXX"); cat > "$f.tmp" && mv "$f.tmp" "$f.json"; rm -f "$f"'


class Agent:
    """One MCP session per turn, as a resumed CLI has; counts calls and answer bytes."""

    def __init__(self, env: dict[str, str]) -> None:
        self.server = StdioServerParameters(
            command=sys.executable, args=["-m", "fedhpc.cli.main", "serve"], env=env
        )
        self.calls: list[tuple[str, int]] = []

    async def call(self, tool: str, **args: Any) -> dict[str, Any]:
        async with Client(self.server, mode="legacy") as client:
            result = await client.call_tool(tool, args)
        text = "".join(getattr(c, "text", "") for c in result.content)
        if result.is_error or result.structured_content is None:
            raise SystemExit(f"{tool} failed: {text}")
        self.calls.append((tool, len(text.encode())))
        body: dict[str, Any] = result.structured_content  # mcp types it Any
        return body


def _take(folder: Path) -> dict[str, Any] | None:
    """The first stored resume payload, removed; None while there is none."""
    done = sorted(folder.glob("resume.*.json"))
    if not done:
        return None
    payload: dict[str, Any] = json.loads(done[0].read_text())
    done[0].unlink()
    return payload


async def _resume(folder: Path, limit: float) -> dict[str, Any]:
    with anyio.fail_after(limit):
        while (payload := _take(folder)) is None:  # noqa: ASYNC110 (files: no event)
            await anyio.sleep(0.2)
    return payload


def _start_daemon(home: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    log = (home / "daemon.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "fedhpc.cli.main", "daemon"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=log,
    )
    log.close()
    return proc


def _payload_sizes(payload: dict[str, Any]) -> tuple[int, int]:
    body = len(json.dumps(payload, separators=(",", ":"), sort_keys=True).encode())
    return body, len(prompt_text([payload]).encode())


async def single(agent: Agent, resumed: Path, limit: float) -> dict[str, Any]:
    handle = await agent.call(
        "submit_task", command=["bash", "-c", "echo hello"], envelope=ENVELOPE, name="econ"
    )
    payload = await _resume(resumed, limit)  # the agent's turn ended; this wakes it
    got = await agent.call("get_result", task_id=handle["task_id"])
    assert got.get("preview") == "hello\n", got
    body, prompt = _payload_sizes(payload)
    return {
        "calls": len(agent.calls),
        "bytes": sum(b for _, b in agent.calls),
        "per_call": agent.calls,
        "payload_bytes": body,
        "prompt_bytes": prompt,
        "submit": handle,
        "result": got,
    }


async def group(agent: Agent, resumed: Path, limit: float) -> dict[str, Any]:
    children = [{"command": ["bash", "-c", f"echo seed {i}"], "name": f"s{i}"} for i in range(4)]
    view = await agent.call(
        "submit_group", objective="four seeds", children=children, envelope=ENVELOPE
    )
    payload = await _resume(resumed, limit)
    first = view["children"][0]["task_id"]
    got = await agent.call("get_result", task_id=first)
    assert got.get("preview") == "seed 0\n", got
    body, prompt = _payload_sizes(payload)
    return {
        "calls": len(agent.calls),
        "bytes": sum(b for _, b in agent.calls),
        "per_call": agent.calls,
        "payload_bytes": body,
        "prompt_bytes": prompt,
    }


_ENVELOPE_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientInfo": {"name": "economy", "version": "1"},
    "io.modelcontextprotocol/clientCapabilities": {
        "extensions": {"io.modelcontextprotocol/tasks": {}}
    },
}


async def tasks_extension(env: dict[str, str], limit: float) -> dict[str, Any]:
    """A Tasks-extension client's whole wait, in wire bytes: handle + terminal notification."""
    proc = await anyio.open_process(
        [sys.executable, "-m", "fedhpc.cli.main", "serve", "--no-autostart"],
        env=env,
        stderr=subprocess.DEVNULL,
    )
    stdin, stdout = proc.stdin, proc.stdout
    assert stdin is not None
    assert stdout is not None
    received: list[tuple[str, int]] = []
    buffer = b""

    async def send(rid: int, method: str, params: dict[str, Any]) -> None:
        msg = {"jsonrpc": "2.0", "id": rid, "method": method}
        msg["params"] = {**params, "_meta": _ENVELOPE_META}
        await stdin.send(json.dumps(msg).encode() + b"\n")

    async def line() -> dict[str, Any]:
        nonlocal buffer
        while b"\n" not in buffer:
            buffer += await stdout.receive()
        raw, buffer = buffer.split(b"\n", 1)
        msg: dict[str, Any] = json.loads(raw)
        received.append((str(msg.get("method") or "result"), len(raw)))
        return msg

    try:
        with anyio.fail_after(limit):
            args = {"command": ["bash", "-c", "echo hello"], "envelope": ENVELOPE}
            await send(1, "tools/call", {"name": "submit_task", "arguments": args})
            created = (await line())["result"]
            assert created["resultType"] == "task", created
            watch = {"notifications": {"taskIds": [created["taskId"]]}}
            await send(2, "subscriptions/listen", watch)
            while True:
                msg = await line()
                params = msg.get("params") or {}
                if msg.get("method") == "notifications/tasks" and params["status"] != "working":
                    break
    finally:
        proc.terminate()
        await proc.wait()
    text = params["result"]["content"][0]["text"]
    assert '"preview":"hello\\n"' in text, text
    handle, note = received[0][1], received[-1][1]
    return {
        "requests": ["tools/call", "subscriptions/listen"],
        "received": received,
        "handle_bytes": handle,
        "terminal_bytes": note,
        "wire_bytes": handle + note,
        "text_bytes": len(text.encode()),
    }


def _compact(value: object) -> int:
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


async def tools_list(env: dict[str, str]) -> dict[str, int]:
    """tools/list through the real client: the model-read part (as test_mcp_wire.py counts it)."""
    server = StdioServerParameters(
        command=sys.executable, args=["-m", "fedhpc.cli.main", "serve"], env=env
    )
    async with Client(server, mode="legacy") as client:
        tools = [
            t.model_dump(by_alias=True, exclude_none=True)
            for t in (await client.list_tools()).tools
        ]
    model = sum(
        _compact(
            {"name": t["name"], "description": t["description"], "inputSchema": t["inputSchema"]}
        )
        for t in tools
    )
    return {"model_read_bytes": model, "tools_bytes": _compact({"tools": tools})}


async def run(home: Path, sites: str, limit: float) -> dict[str, Any]:
    resumed = home / "resumed"
    resumed.mkdir(parents=True)
    devfed = "1" if sites == "slurm" else "process"
    env = {
        **os.environ,
        "FEDHPC_HOME": str(home),
        "FEDHPC_DEVFED": devfed,
        "FEDHPC_CYCLE_S": "1",
        "FEDHPC_REFRESH_S": "2",
        "FEDHPC_LOG_LEVEL": "warning",
    }
    proc = _start_daemon(home, env)
    try:
        async with DaemonClient(DaemonSettings.from_env(home=home)) as client:
            await client.wait_until_up(30)
            await client.refresh()
        continuation = {
            "runtime": "command",
            "command": ["bash", "-c", RESUME, "agent", str(resumed)],
        }
        agent_env = {**env, "FEDHPC_CONTINUATION": json.dumps(continuation)}
        one = await single(Agent(agent_env), resumed, limit)
        four = await group(Agent(agent_env), resumed, limit)
        tasks = await tasks_extension(env, limit)
        listed = await tools_list(env)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
    return {"sites": sites, "single": one, "group": four, "tasks": tasks, "tools_list": listed}


def _row(label: str, value: int, target: int | None, unit: str = "B") -> str:
    verdict = "" if target is None else ("pass" if value <= target else "FAIL")
    goal = "" if target is None else f"<= {target:,} {unit}"
    return f"{label:<52} {value:>7,} {unit:<5} {goal:>14}  {verdict}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sites", choices=["slurm", "process"], default="slurm")
    ap.add_argument("--timeout", type=float, default=180.0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    home = Path(tempfile.mkdtemp(prefix="fedhpc-bench-econ-"))
    try:
        r = anyio.run(run, home, args.sites, args.timeout)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    if args.json:
        print(json.dumps(r, indent=2))
        return 0
    one, four = r["single"], r["group"]
    print(f"agent-loop economy on the local federation ({r['sites']} sites), real MCP client")
    print("one job (`echo hello`): submit -> resumed -> get_result")
    print(_row("  tool calls", one["calls"], 2, "calls"))
    for tool, size in one["per_call"]:
        print(_row(f"    {tool} answer text", size, None))
    print(_row("  tool-result text read, submit + result", one["bytes"], 512))
    print(_row("  continuation payload (JSON)", one["payload_bytes"], 2048))
    print(_row("  resume prompt (payload + instruction)", one["prompt_bytes"], None))
    print("four-child group: submit_group -> resumed -> get_result of one child")
    print(_row("  tool calls", four["calls"], 2, "calls"))
    for tool, size in four["per_call"]:
        print(_row(f"    {tool} answer text", size, None))
    print(_row("  tool-result text read, submit + one result", four["bytes"], 2048))
    print(_row("  continuation payload (JSON)", four["payload_bytes"], 2048))
    print(_row("  resume prompt (payload + instruction)", four["prompt_bytes"], None))
    t = r["tasks"]
    print("one job, a client without hooks: Tasks extension at 2026-07-28, stdio wire bytes")
    print(_row("  requests sent (tools/call, subscriptions/listen)", len(t["requests"]), 2, "reqs"))
    print(_row("    task handle (CreateTaskResult line)", t["handle_bytes"], None))
    print(_row("    terminal notifications/tasks line", t["terminal_bytes"], None))
    print(_row("  received, handle + terminal status", t["wire_bytes"], None))
    print(_row("  result text the model reads (get_result's)", t["text_bytes"], 512))
    lt = r["tools_list"]
    print("tools/list")
    print(_row("  model-read: names, descriptions, input schemas", lt["model_read_bytes"], 6144))
    print(_row("  the whole tool list (JSON)", lt["tools_bytes"], 16384))
    print("  (issue 14 before: 2,193 B for submit + get_result(preview) of a 6-byte output;")
    print("   srunx: 708-804 B over 6-7 calls)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
