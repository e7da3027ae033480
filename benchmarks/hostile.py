"""Hostile input: draft_envelope's worst case at its input limits, and the daemon's
inspect_federation latency while pathological requests are in flight (issue 15).

Run: .venv/bin/python benchmarks/hostile.py [--samples 400] [--json]
The drafter part is pure. The daemon part starts a real `fedhpc daemon` with the local test
federation's sites (FEDHPC_DEVFED=1) in a temporary home; inspect_federation answers from the
daemon's view whether or not every cluster is up. The hostile clients run in another process,
so their own work does not count as the daemon's latency. A measurement, not a test: it marks
pass/fail and exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import httpx2

from fedhpc.client.daemon_client import DaemonClient
from fedhpc.ops.draft import draft_envelope
from fedhpc.placement.draft import (
    MAX_CODE_CONTEXT_CHARS,
    MAX_CODE_CONTEXT_ITEMS,
    MAX_DESCRIPTION_CHARS,
)
from fedhpc.settings.daemon import DaemonSettings

TARGET_DRAFT_S = 0.050
TARGET_P99_S = 0.100
D, C = MAX_DESCRIPTION_CHARS, MAX_CODE_CONTEXT_CHARS
_SNIP = C // MAX_CODE_CONTEXT_ITEMS


def _code(unit: str) -> tuple[str, ...]:
    return tuple((unit * (_SNIP // len(unit) + 1))[:_SNIP] for _ in range(MAX_CODE_CONTEXT_ITEMS))


# Inputs at the limits, each aimed at one pattern family: digit runs (the old quadratic case),
# decimal chains, near-miss signal words, unit suffixes, and everything at once.
WORST: dict[str, tuple[str, tuple[str, ...]]] = {
    "digits": ("9" * D, _code("9")),
    "decimal chains": ("1." * (D // 2), _code("1.")),
    "digits then space": ("9" * (D - 1) + " ", _code("9" * 999 + " ")),
    "near-miss units": ("9 hour" * (D // 6), _code("9 minut")),
    "near-miss signals": ("torch.distribute " * (D // 17), _code("--nproc_per_nod ")),
    "signals everywhere": (
        ("torchrun --nproc_per_node=8 num_workers=7 sweep 12 configs 70B model " * 200)[:D],
        _code("Pool(processes=64) n_jobs=32 pandas csv 2.5 hours "),
    ),
    "unicode": (("\u202e\u0661\u0662 h\u00e9ure \ud800 " * D)[:D], _code("\uff19\uff10 hours ")),
    "whitespace runs": ("9" + " " * (D - 8) + "hours", _code(" " * 100 + "9")),
    "words inside words": ("xgpu_xcuda " * (D // 11), _code("xcpu.xddp-xsweep_xserv ")),
}


def bench_draft(repeats: int) -> dict[str, tuple[float, float]]:
    """Per worst-case input: (median, max) seconds over `repeats` runs. The median is the
    figure judged: on a shared machine the max also measures whoever else had the CPU."""
    out: dict[str, tuple[float, float]] = {}
    for name, (desc, code) in WORST.items():
        assert len(desc) <= D, name
        assert sum(map(len, code)) <= C, name
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            draft_envelope(desc, code)
            times.append(time.perf_counter() - t0)
        out[name] = (statistics.median(times), max(times))
    return out


def _pathological() -> list[tuple[str, str, bytes]]:
    """(label, path, body) requests a hostile client sends over and over."""
    deep = b'{"command":["true"],"envelope":' + b"[" * 480_000 + b"]" * 480_000 + b"}"
    draft = json.dumps({"description": "9" * D, "code_context": list(_code("9"))}).encode()
    draft_u = json.dumps(
        {"description": WORST["unicode"][0], "code_context": list(WORST["unicode"][1])}
    ).encode()
    huge_numbers = json.dumps(
        {"command": ["true"], "envelope": {"memory": {"min": "9" * 400 + "G"}}}
    ).encode()
    group = json.dumps(
        {
            "objective": "x",
            "envelope": {"gpus": {"min": 10**400}},
            "children": [{"command": ["true"]}] * 1000,
        }
    ).encode()
    return [
        ("draft at limits (digits)", "/v1/envelopes/draft", draft),
        ("draft at limits (unicode)", "/v1/envelopes/draft", draft_u),
        ("960k-deep JSON", "/v1/tasks", deep),
        ("400-digit memory", "/v1/tasks", huge_numbers),
        ("1000-child group, invalid", "/v1/groups", group),
        ("2 MB body", "/v1/groups", b"{" + b" " * 2_000_000 + b"}"),
    ]


async def _latencies(sock: Path, samples: int, stop: anyio.Event | None) -> list[float]:
    out: list[float] = []
    transport = httpx2.AsyncHTTPTransport(uds=str(sock))
    async with httpx2.AsyncClient(transport=transport, base_url="http://fedhpc") as http:
        for _ in range(samples):
            t0 = time.perf_counter()
            resp = await http.get("/v1/federation")
            out.append(time.perf_counter() - t0)
            assert resp.status_code == 200, resp.text
            await anyio.sleep(0.005)
    if stop is not None:
        stop.set()
    return out


async def _flood(sock: Path, stop: anyio.Event, counts: dict[str, list[int]]) -> None:
    reqs = _pathological()
    transport = httpx2.AsyncHTTPTransport(uds=str(sock))
    async with httpx2.AsyncClient(
        transport=transport, base_url="http://fedhpc", timeout=60
    ) as http:
        while not stop.is_set():
            for label, path, body in reqs:
                resp = await http.post(path, content=body)
                counts.setdefault(label, []).append(resp.status_code)
                if stop.is_set():
                    return


async def flood_main(sock: Path, clients: int) -> None:
    """The hostile side, in its own process: `clients` concurrent clients until a line arrives
    on stdin; then prints the statuses it got as JSON."""
    counts: dict[str, list[int]] = {}
    stop = anyio.Event()
    async with anyio.create_task_group() as tg:
        for _ in range(clients):
            tg.start_soon(_flood, sock, stop, counts)
        await anyio.to_thread.run_sync(sys.stdin.readline)
        stop.set()
    print(json.dumps(counts), flush=True)


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def bench_daemon(samples: int, flooders: int) -> dict[str, Any]:
    home = Path(tempfile.mkdtemp(prefix="fedhpc-hostile-")) / "home"
    env = {
        **os.environ,
        "FEDHPC_HOME": str(home),
        "FEDHPC_DEVFED": "1",
        "FEDHPC_REFRESH_S": "2",
        "FEDHPC_LOG_LEVEL": "warning",
    }
    home.mkdir(parents=True)
    proc = subprocess.Popen(  # noqa: ASYNC220 (started once, before anything is measured)
        [sys.executable, "-m", "fedhpc.cli.main", "daemon"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=(home.parent / "daemon.log").open("wb"),
    )
    try:
        settings = DaemonSettings.from_env(home=home)
        async with DaemonClient(settings) as client:
            await client.wait_until_up(60)
            await client.refresh()
        sock = settings.socket_path
        await _latencies(sock, 20, None)  # warm-up
        baseline = await _latencies(sock, samples, None)
        flood = await anyio.open_process(
            [sys.executable, __file__, "--flood", str(sock), "--flooders", str(flooders)]
        )
        assert flood.stdin is not None
        assert flood.stdout is not None
        await anyio.sleep(2.0)  # the hostile clients are sending
        loaded = await _latencies(sock, samples, None)
        await flood.stdin.send(b"stop\n")
        out = b""
        async for chunk in flood.stdout:
            out += chunk
        await flood.wait()
        counts: dict[str, list[int]] = json.loads(out or b"{}")
        alive = proc.poll() is None
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    return {
        "baseline": baseline,
        "loaded": loaded,
        "statuses": {k: sorted(set(v)) for k, v in counts.items()},
        "requests": {k: len(v) for k, v in counts.items()},
        "alive": alive,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=400)
    ap.add_argument("--flooders", type=int, default=4, help="concurrent hostile clients")
    ap.add_argument("--repeats", type=int, default=20, help="draft runs per worst-case input")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--flood", type=Path, help=argparse.SUPPRESS)  # the hostile child process
    args = ap.parse_args()
    if args.flood:
        anyio.run(flood_main, args.flood, args.flooders)
        return 0
    mark: Callable[[bool], str] = lambda ok: "pass" if ok else "FAIL"  # noqa: E731
    machine = f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs"
    report: dict[str, Any] = {"machine": f"{machine}, Python {platform.python_version()}"}
    drafts = bench_draft(args.repeats)
    worst = max(med for med, _ in drafts.values())
    report["draft_s"] = {k: {"median": m, "max": x} for k, (m, x) in drafts.items()}
    if not args.json:
        print(f"# {report['machine']}, load average {os.getloadavg()[0]:.2f}")
        print(
            f"draft_envelope at its limits ({D} chars + {C} chars of code), "
            f"{args.repeats} runs each:"
        )
        for name, (med, top) in drafts.items():
            print(f"  {name:<22} median {med * 1000:7.2f} ms   max {top * 1000:7.2f} ms")
        print(
            f"  worst input, median    {worst * 1000:7.2f} ms  (target <= "
            f"{TARGET_DRAFT_S * 1000:.0f} ms: {mark(worst <= TARGET_DRAFT_S)})"
        )
    d = anyio.run(bench_daemon, args.samples, args.flooders)
    base, loaded = d["baseline"], d["loaded"]
    report["daemon"] = {
        "baseline_p50_ms": statistics.median(base) * 1000,
        "baseline_p99_ms": _pct(base, 0.99) * 1000,
        "loaded_p50_ms": statistics.median(loaded) * 1000,
        "loaded_p99_ms": _pct(loaded, 0.99) * 1000,
        "loaded_max_ms": max(loaded) * 1000,
        "hostile_requests": d["requests"],
        "statuses": d["statuses"],
        "daemon_alive": d["alive"],
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    r = report["daemon"]
    print(f"inspect_federation (GET /v1/federation), {args.samples} samples each:")
    print(
        f"  idle:         p50 {r['baseline_p50_ms']:7.2f} ms   p99 {r['baseline_p99_ms']:7.2f} ms"
    )
    print(
        f"  under attack: p50 {r['loaded_p50_ms']:7.2f} ms   p99 {r['loaded_p99_ms']:7.2f} ms"
        f"   max {r['loaded_max_ms']:7.2f} ms  (target p99 <= {TARGET_P99_S * 1000:.0f} ms: "
        f"{mark(r['loaded_p99_ms'] <= TARGET_P99_S * 1000)})"
    )
    print(f"  {args.flooders} hostile clients sent, with statuses:")
    for label, n in d["requests"].items():
        print(f"    {label:<28} x{n:<5} {d['statuses'][label]}")
    print(f"  daemon alive afterwards: {d['alive']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
