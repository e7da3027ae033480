"""The `daemon` policy of matched_rounds.py: the placement a running `fedhpc daemon` makes
through its real API (REST, as `fedhpc serve` calls it) for a round's request.

`DaemonPolicy.start()` starts a real daemon (own temporary FEDHPC_HOME, the local federation,
control cycle and refresh 2 s) and waits for its first probe of every site; `place()` submits
the round's `sleep N` with the round's envelope and waits until the daemon has handed it to a
scheduler; that job then stands as the matched job of the partition the daemon chose.
Pending-job replacement is off so the job stays where the daemon first put it."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio

from fedhpc.client.daemon_client import DaemonClient
from fedhpc.domain import ResourceEnvelope
from fedhpc.ops.tasks import AdaptationPolicy, ResultRequest, SubmitTaskRequest
from fedhpc.settings.daemon import DaemonSettings

__all__ = ["DaemonPolicy"]


class DaemonPolicy:
    def __init__(self, home: Path, proc: subprocess.Popen[bytes]) -> None:
        self.home = home
        self.proc = proc
        self.settings = DaemonSettings.from_env(home=home)
        self.placed: list[tuple[float, str]] = []  # (submit-to-placed seconds, decision)

    @classmethod
    async def start(cls, cycle_s: float = 2.0) -> DaemonPolicy:
        home = Path(tempfile.mkdtemp(prefix="fedhpc-matched-daemon-"))
        env = {
            **os.environ,
            "FEDHPC_HOME": str(home),
            "FEDHPC_DEVFED": "1",
            "FEDHPC_CYCLE_S": str(cycle_s),
            "FEDHPC_REFRESH_S": str(cycle_s),
            "FEDHPC_LOG_LEVEL": "info",
        }
        with (home / "daemon.log").open("wb") as log:
            proc = subprocess.Popen(  # noqa: ASYNC220
                [sys.executable, "-m", "fedhpc.daemon"],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
        self = cls(home, proc)
        os.environ["FEDHPC_HOME"] = str(home)
        async with DaemonClient(self.settings) as client:
            await client.wait_until_up(30)
            await client.refresh()
        return self

    async def place(
        self, i: int, env: ResourceEnvelope, sleep_s: int
    ) -> tuple[str, str, str, str, str] | None:
        """(site/partition, job id, site, partition, decision) of the daemon's placement."""
        req = SubmitTaskRequest(
            command=("sleep", str(sleep_s)),
            envelope=env,
            name=f"matched-r{i}",
            adaptation=AdaptationPolicy(
                replace_pending=False, max_retries=0, max_wall_extensions=0
            ),
        )
        t0 = time.monotonic()
        async with DaemonClient(self.settings) as client:
            handle = await client.submit_task(req)
            with anyio.move_on_after(30):
                while handle.job_id is None and not handle.state.terminal:
                    await anyio.sleep(0.2)
                    r = await client.get_result(ResultRequest(task_id=handle.task_id))
                    atts = [a for a in r.attempts if not a.superseded]
                    if atts and atts[-1].job_id:
                        a = atts[-1]
                        handle = handle.model_copy(
                            update={
                                "job_id": a.job_id,
                                "site": a.site,
                                "partition": a.partition,
                                "decision": r.provenance.decision if r.provenance else "",
                            }
                        )
                    elif r.state.terminal:
                        handle = handle.model_copy(update={"state": r.state})
        if handle.job_id is None or handle.site is None or handle.partition is None:
            print(f"round {i}: the daemon did not place the task: {handle.decision}", flush=True)
            return None
        self.placed.append((time.monotonic() - t0, handle.decision))
        key = f"{handle.site}/{handle.partition}"
        return key, handle.job_id, handle.site, handle.partition, handle.decision

    async def estimators(self) -> list[dict[str, object]]:
        """The daemon's own calibration rows (`GET /v1/estimators`, `fedhpc status`)."""
        async with DaemonClient(self.settings) as client:
            rows: list[dict[str, object]] = (await client.estimators())["estimators"]
            return rows

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()

    def report(self) -> str:
        lines = [f"daemon policy: {len(self.placed)} placements (log {self.home}/daemon.log)"]
        lines += [f"  {dt:.2f} s to a job id: {d}" for dt, d in self.placed]
        return "\n".join(lines)
