"""A hostile REST client in its own process: `python -m tests.integration.hostile_flood SOCK N`
sends pathological requests from N concurrent clients until a line arrives on stdin, then
prints `{label: [status, ...]}` as JSON. Its own CPU is not the daemon's latency."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import anyio
import httpx2

from fedhpc.placement.draft import MAX_CODE_CONTEXT_CHARS, MAX_DESCRIPTION_CHARS

_SNIPPET = "9" * (MAX_CODE_CONTEXT_CHARS // 32)


def requests() -> list[tuple[str, str, bytes]]:
    """(label, path, body): each aimed at a different way to stall or crash the daemon."""
    deep = b'{"command":["true"],"envelope":' + b"[" * 400_000 + b"]" * 400_000 + b"}"
    draft = {"description": "9" * MAX_DESCRIPTION_CHARS, "code_context": [_SNIPPET] * 32}
    words = {"description": "xgpu_xcuda " * 700, "code_context": ["xcpu.xddp-xsweep "] * 32}
    huge = {"command": ["true"], "envelope": {"memory": {"min": "9" * 400 + "G"}}}
    group = {
        "objective": "x",
        "envelope": {"gpus": {"min": 10**400}},
        "children": [{"command": ["true"]}] * 1000,
    }
    return [
        ("draft at limits", "/v1/envelopes/draft", json.dumps(draft).encode()),
        ("draft word starts", "/v1/envelopes/draft", json.dumps(words).encode()),
        ("deep JSON", "/v1/tasks", deep),
        ("huge memory", "/v1/tasks", json.dumps(huge).encode()),
        ("invalid 1000-child group", "/v1/groups", json.dumps(group).encode()),
        ("2 MB body", "/v1/groups", b"{" + b" " * 2_000_000 + b"}"),
    ]


async def _client(sock: Path, stop: anyio.Event, counts: dict[str, list[int]]) -> None:
    reqs = requests()
    transport = httpx2.AsyncHTTPTransport(uds=str(sock))
    async with httpx2.AsyncClient(transport=transport, base_url="http://x", timeout=60) as http:
        while not stop.is_set():
            for label, path, body in reqs:
                resp = await http.post(path, content=body)
                counts.setdefault(label, []).append(resp.status_code)
                if stop.is_set():
                    return


async def main(sock: Path, clients: int) -> None:
    counts: dict[str, list[int]] = {}
    stop = anyio.Event()
    async with anyio.create_task_group() as tg:
        for _ in range(clients):
            tg.start_soon(_client, sock, stop, counts)
        print("ready", flush=True)
        await anyio.to_thread.run_sync(sys.stdin.readline)
        stop.set()
    print(json.dumps(counts), flush=True)


if __name__ == "__main__":
    anyio.run(main, Path(sys.argv[1]), int(sys.argv[2]))
