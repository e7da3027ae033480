"""A scripted agent, driven like a coding agent would be: through a real MCP client over stdio.

`plan`: inspect the federation, draft an envelope, submit a 4-child group, end the turn.
`resume`: woken by the bridge (the payload on stdin), read the manifests, print a summary and
a timeline of attempts per site. No status call happens in between: that is the point.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters

from fedhpc.settings import CONTINUATION

__all__ = ["main"]


def _server(env: dict[str, str] | None = None) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "fedhpc.cli.main", "serve"],
        env={**os.environ, **(env or {})},
    )


async def _call(client: Client, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    result = await client.call_tool(tool, args)
    body = result.structured_content
    if result.is_error or body is None:
        text = " ".join(getattr(c, "text", "") for c in result.content)
        raise SystemExit(f"{tool} failed: {text}")
    return dict(body)


async def plan(out: Path, children: int = 4) -> None:
    resume = [sys.executable, "-m", "fedhpc_dev.demo.agent", "resume", "--out", str(out)]
    continuation = json.dumps({"runtime": "command", "command": resume})
    async with Client(_server({CONTINUATION.name: continuation}), mode="legacy") as client:
        tools = await client.list_tools()
        print(f"agent: connected; {len(tools.tools)} fedhpc tools")
        view = await _call(client, "inspect_federation", {"refresh": True})
        for s in view["sites"]:
            free = sum(p["free_gpus"] for p in s["partitions"])
            pend = sum(p["pending_jobs"] for p in s["partitions"])
            print(
                f"agent: observe {s['site']:<11} {s['health']:<8} free GPUs {free:>2}, "
                f"pending {pend}"
            )
        draft = await _call(
            client,
            "draft_envelope",
            {
                "description": "evaluate four checkpoints of a small model, one GPU each",
                "code_context": ["model.eval()", "with torch.no_grad(): model(batch.cuda())"],
            },
        )
        env = draft["envelope"]
        print(
            f"agent: plan   {draft.get('workload')} envelope: gpus {env['gpus']}, "
            f"wall {env['wall_time']} (confidence {draft['confidence']:.1f})"
        )
        env["wall_time"] = {"min": 300, "max": 600}
        group = await _call(
            client,
            "submit_group",
            {
                "objective": f"evaluate {children} checkpoints on distinct systems",
                "children": [
                    {
                        "command": [
                            "bash",
                            "-c",
                            f"echo ckpt{i} on $(hostname) GPUs=$CUDA_VISIBLE_DEVICES; sleep 5",
                        ],
                        "name": f"ckpt{i}",
                    }
                    for i in range(children)
                ],
                "envelope": env,
                "spread": True,
            },
        )
        for c in group["children"]:  # a child being placed has no site yet, nor a job id
            where = f"{c['site']}/{c['partition']}" if "site" in c else "placing"  # until submitted
            where += f" job {c['job_id']}" if "job_id" in c else ""
            print(f"agent: act    {c['task_id']} -> {where}: {c.get('decision', '')}")
        print(f"agent: yield  group {group['group_id']}: ending the turn ({group['next'][:40]}...)")


def _t(value: str | None, t0: datetime) -> str:
    if not value:
        return "   -"
    return f"{(datetime.fromisoformat(value) - t0).total_seconds():>4.0f}"


async def resume(out: Path, payload: dict[str, Any]) -> None:
    subject = payload.get("group_id") or payload.get("subject")  # the payload names the group
    lines = [
        f"agent: resumed by {payload['event']} for {subject} "
        f"({len(json.dumps(payload))} bytes, state {payload.get('state')})"
    ]
    async with Client(_server(), mode="legacy") as client:
        contents = (await client.read_resource(f"fedhpc://groups/{subject}")).contents
        group = json.loads(getattr(contents[0], "text", "{}"))
        # The task resource is the full manifest (get_result is brief: no timestamps).
        results = []
        for c in group["children"]:
            read = await client.read_resource(f"fedhpc://tasks/{c['task_id']}")
            results.append(json.loads(getattr(read.contents[0], "text", "{}")))
    # Answers are compact: a key without a value (no start yet, not superseded) is absent.
    stamps = [a["submitted_at"] for r in results for a in r["attempts"] if a.get("submitted_at")]
    t0 = min(datetime.fromisoformat(s) for s in stamps)
    lines.append(f"agent: group {group['state']}: {group['counts']}")
    lines.append("agent: timeline (seconds after submission)")
    lines.append(
        f"  {'task':<15} {'n':>1} {'site':<11} {'partition':<10} {'state':<10} "
        f"{'sub':>4} {'start':>5} {'end':>4}  note"
    )
    for r in results:
        for a in r["attempts"]:
            note = "superseded, re-placed" if a.get("superseded") else ""
            sub, start = _t(a.get("submitted_at"), t0), _t(a.get("started_at"), t0)
            lines.append(
                f"  {r['task_id']:<15} {a['n']:>1} {a['site']:<11} {a['partition']:<10} "
                f"{a['state']:<10} {sub} {start:>5} {_t(a.get('ended_at'), t0)}  {note}"
            )
    text = "\n".join(lines) + "\n"
    tmp = out.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.rename(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fedhpc_dev.demo.agent")
    parser.add_argument("step", choices=["plan", "resume"])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--children", type=int, default=4, help="checkpoints to evaluate")
    args = parser.parse_args(argv)
    if args.step == "plan":
        anyio.run(plan, args.out, args.children)
    else:
        anyio.run(resume, args.out, json.loads(sys.stdin.read()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
