"""The liveness gate (issue 40, item 4): the scheduler's ping runs ahead of the probe and of
each observation, in the same remote call, and a controller that does not answer it is found
at once (`ControllerDown`), not after the heavier command's retries. Run through real bash with
stand-in `scontrol`/`squeue` scripts on the PATH; the site states and events carry the time
the answer was seen."""

from __future__ import annotations

import os
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast
from unittest import mock

import anyio
import pytest

from fedhpc.adapters.command import Command, CommandResult, batch
from fedhpc.adapters.dialects.busy import SchedulerBusy
from fedhpc.adapters.liveness import (
    ControllerDown,
    ControllerSilent,
    Ping,
    down_in,
    gated,
    ping_of,
    suspect_ping_s,
)
from fedhpc.adapters.site import SiteAdapter, open_adapter
from fedhpc.collector import Collector
from fedhpc.domain import Health, UserConfig
from fedhpc.domain.config import Site
from fedhpc.placement import PolicyKind
from fedhpc.profiles import load_federation
from fedhpc.settings.daemon import DaemonSettings
from fedhpc.store import Store
from tests.unit.test_placement_world import state
from tests.unit.test_slow_site import LIMIT_S, SLOW, _Gate, _world
from tests.unit.test_submit_accept import _req

UP = 'echo "Slurmctld(primary) at vm is UP"'
DOWN = 'echo "Slurmctld(primary) at vm is DOWN"; exit 1'
BACKUP = 'echo "Slurmctld(primary) at a is DOWN"; echo "Slurmctld(backup) at b is UP"; exit 1'
BUSY = 'echo "slurm_ping: Socket timed out on send/recv operation" >&2; exit 1'
SILENT = "exit 124"  # what timeout(1) makes of a ping that did not answer within its deadline


class Bash:
    """A transport that runs each command in real bash, with `bin` first on the PATH."""

    name = "bash"

    def __init__(self, bin_dir: Path) -> None:
        self.bin = bin_dir
        self.calls: list[Command] = []

    async def run(self, command: Command) -> CommandResult:
        self.calls.append(command)
        env = {**os.environ, **command.env, "PATH": f"{self.bin}:{os.environ['PATH']}"}
        done = await anyio.run_process(
            list(command.argv),
            input=(command.stdin or "").encode(),
            env=env,
            check=False,
        )
        return CommandResult(done.returncode, done.stdout.decode(), done.stderr.decode())

    async def aclose(self) -> None:
        return None


@pytest.fixture
def devvista(monkeypatch: pytest.MonkeyPatch) -> Site:
    monkeypatch.setenv("FEDHPC_DEVFED", "1")
    return load_federation(UserConfig())["devvista"]


@pytest.fixture
def bin_dir(tmp_path: Path) -> Path:
    """`scontrol` answers as `controller` says; `squeue` and `sinfo` leave a trace when run,
    `sacct` finds nothing."""
    d = tmp_path / "bin"
    d.mkdir()
    (tmp_path / "controller").write_text(UP)
    for name, body in {
        "scontrol": f'if [ "$1" = ping ]; then source {tmp_path / "controller"}; fi',
        "squeue": f"touch {tmp_path / 'squeue-ran'}",
        "sinfo": f"touch {tmp_path / 'sinfo-ran'}",
        "sacct": "true",
    }.items():
        (d / name).write_text(f"#!/bin/bash\n{body}\n")
        (d / name).chmod(0o755)
    return d


def _controller(bin_dir: Path, script: str) -> None:
    (bin_dir.parent / "controller").write_text(script)


async def test_a_dead_controller_ends_the_observation_at_once_without_squeue(
    devvista: Site, bin_dir: Path
) -> None:
    adapter = SiteAdapter(devvista, Bash(bin_dir))
    _controller(bin_dir, DOWN)
    with pytest.raises(ControllerDown) as exc:
        await adapter.status(["1"])
    assert "slurmctld does not answer (scontrol ping: DOWN)" in exc.value.message
    assert adapter.down is exc.value
    assert not (bin_dir.parent / "squeue-ran").exists()
    assert adapter.calls["status"] == 1  # one remote call: ping and squeue together
    _controller(bin_dir, UP)
    assert await adapter.status(["1"]) == []
    assert (bin_dir.parent / "squeue-ran").exists()
    assert adapter.down is None  # it answered


async def test_a_serving_backup_controller_is_no_lost_site(devvista: Site, bin_dir: Path) -> None:
    adapter = SiteAdapter(devvista, Bash(bin_dir))
    _controller(bin_dir, BACKUP)
    await adapter.find(["fedhpc-t-1"])
    assert (bin_dir.parent / "squeue-ran").exists()
    assert adapter.down is None


async def test_a_ping_refused_for_load_is_busy_not_down(devvista: Site, bin_dir: Path) -> None:
    adapter = SiteAdapter(devvista, Bash(bin_dir))
    _controller(bin_dir, BUSY)
    with pytest.raises(SchedulerBusy):
        await adapter.status(["1"])
    assert adapter.down is None
    with pytest.raises(SchedulerBusy):  # the collector backs off; the site is not lost
        await adapter.probe()


async def test_a_probe_behind_a_dead_controller_is_offline_stamped_when_seen(
    devvista: Site, bin_dir: Path
) -> None:
    adapter = SiteAdapter(devvista, Bash(bin_dir))
    _controller(bin_dir, "sleep 0.3; " + DOWN)
    before = datetime.now(UTC)
    state = await adapter.probe()
    assert state.health is Health.OFFLINE
    assert "scontrol ping: DOWN" in str(state.error)
    assert not (bin_dir.parent / "sinfo-ran").exists()  # the probe's sections never ran
    assert state.collected_at >= before + timedelta(seconds=0.3)  # when the answer came
    probe = adapter.transport.calls[-1]  # type: ignore[attr-defined]
    assert probe.argv == ("bash", "-s")  # still one batched script: the gate is its head


async def test_an_answering_controller_is_stamped_when_its_probe_answered(
    devvista: Site, bin_dir: Path
) -> None:
    adapter = SiteAdapter(devvista, Bash(bin_dir))
    _controller(bin_dir, "sleep 0.3; " + UP)
    before = datetime.now(UTC)
    state = await adapter.probe()
    assert (bin_dir.parent / "sinfo-ran").exists()
    assert state.collected_at >= before + timedelta(seconds=0.3)


def _shell(command: Command) -> CommandResult:
    done = subprocess.run(
        list(command.argv), input=command.stdin, capture_output=True, text=True, check=False
    )
    return CommandResult(done.returncode, done.stdout, done.stderr)


def test_a_ping_that_does_not_answer_in_time_is_down() -> None:
    hung = Ping(Command(("sleep", "30")), lambda r: None)
    result = _shell(gated(Command(("echo", "ran")), hung, ping_timeout_s=0.3))
    found = down_in(result, hung, site="s", dialect="slurm", ping_timeout_s=0.3)
    assert isinstance(found, ControllerSilent)  # a ControllerDown the collector asks again
    assert "did not answer `sleep 30` within 0.3 s" in found.message
    assert "ran" not in result.stdout


def test_a_missing_ping_decides_nothing_and_the_command_runs() -> None:
    absent = Ping(Command(("fedhpc-no-such-ping",)), lambda r: "never")
    result = _shell(gated(Command(("echo", "ran")), absent))
    assert result.stdout == "ran\n"
    assert down_in(result, absent, site="s", dialect="slurm") is None


def test_the_gated_command_and_its_script_arrive_inert(tmp_path: Path) -> None:
    canary = tmp_path / "canary"
    hostile = f"$(touch {canary}); touch {canary} `touch {canary}` '\"\n#SBATCH"
    ok = Ping(Command(("true",)), lambda r: None)
    argv = _shell(gated(Command(("printf", "%s", hostile)), ok))
    assert argv.stdout == hostile
    script = batch({"echo": Command(("printf", "%s", hostile))})
    gated_script = gated(script, ok)
    assert gated_script.argv == ("bash", "-s")
    assert hostile in _shell(gated_script).stdout
    assert not canary.exists()


def test_each_scheduler_has_its_ping() -> None:
    pings = {d: ping_of(d) for d in ("slurm", "pbs", "lsf", "process")}
    argvs = {d: p.command.argv if p else None for d, p in pings.items()}
    assert argvs == {
        "slurm": ("scontrol", "ping"),
        "pbs": ("qstat", "-B"),
        "lsf": ("lsid",),
        "process": None,  # no controller to ask
    }


async def test_a_controller_found_down_is_probed_now_and_wakes_the_control_cycle(
    devvista: Site, bin_dir: Path, store: Store
) -> None:
    adapter = SiteAdapter(devvista, Bash(bin_dir))
    col = Collector({"devvista": devvista}, {"devvista": adapter}, store, refresh_s=60)
    woken: list[bool] = []
    col.on_lost = lambda: woken.append(True)
    await col.refresh(force=True)
    assert col.latest["devvista"].health.value != "offline"  # answered (stand-ins: degraded)
    assert not woken
    _controller(bin_dir, DOWN)
    with pytest.raises(ControllerDown):
        await adapter.status(["1"])  # the control cycle's observation finds it
    col.probe_soon("devvista")  # what the cycle does then: probed at once, not in 2 s
    seen = datetime.now(UTC)
    report = await col.refresh()
    assert set(report.probed) == {"devvista"}
    assert col.latest["devvista"].health is Health.OFFLINE
    assert woken == [True]
    (offline,) = [e for e in await store.events_after(0) if e.kind == "site.offline"]
    assert offline.created_at >= seen  # stamped when the ping said so


async def test_a_site_lost_while_its_squeue_hangs_moves_its_work_without_waiting(
    store: Store,
) -> None:
    """A hung controller: the cycle's squeue waits, the collector's probe finds the controller
    down meanwhile; the observation is abandoned and the queued work moves in that cycle."""
    o, slow, fast = _world(store)
    held = _Gate()
    slow.gates["status"] = held  # slow's squeue never answers in this test
    req = _req(command=("echo", "x"), policy=PolicyKind.FIXED_SITE, fixed_site="slow")
    req = req.model_copy(update={"fallback": True})
    task_id = (await o.intake.submit_task(req, wait_s=0)).task_id
    await o.place_queued()
    with anyio.fail_after(LIMIT_S):
        while (await o.book.load_attempts(task_id))[0].job_id is None:
            await anyio.sleep(0.01)
    down = state(SLOW.profile, health=Health.OFFLINE)
    o.collector.adapters = {"slow": cast(Any, slow), "fast": cast(Any, fast)}
    with anyio.fail_after(LIMIT_S):  # the tick ends although slow's squeue never answers
        async with anyio.create_task_group() as tg:
            tg.start_soon(o.tick)
            await held.entered.wait()
            with mock.patch.object(slow, "probe", mock.AsyncMock(return_value=down)):
                await o.collector.refresh(force=True)
        while len(attempts := await o.book.load_attempts(task_id)) < 2:
            await o.dispatcher.send_later()
            await anyio.sleep(0.01)
    assert attempts[0].superseded and "slow offline" in str(attempts[0].reason)
    assert attempts[1].site == "fast"
    assert not held.open.is_set()  # never answered: the move did not wait for it


async def test_one_silent_ping_is_asked_again_before_the_site_is_lost(
    devvista: Site, bin_dir: Path, store: Store
) -> None:
    """A loaded controller that misses one ping deadline and answers the next is never
    offline (no `site.offline` wakes an agent); a second silence in a row is a lost site."""
    adapter = SiteAdapter(devvista, Bash(bin_dir))
    col = Collector({"devvista": devvista}, {"devvista": adapter}, store, refresh_s=60)
    woken: list[bool] = []
    col.on_lost = lambda: woken.append(True)
    await col.refresh(force=True)
    _controller(bin_dir, SILENT)
    with pytest.raises(ControllerSilent):
        await adapter.probe()
    await col.refresh(force=True)
    held = col.latest["devvista"]
    assert held.health is Health.DEGRADED and "did not answer" in str(held.error)
    assert set((await col.refresh()).probed) == {"devvista"}  # due again at once, not in 60 s
    assert col.latest["devvista"].health is Health.OFFLINE  # silent twice: lost
    assert woken == [True]
    _controller(bin_dir, UP)
    await col.refresh(force=True)
    _controller(bin_dir, SILENT)
    await col.refresh(force=True)  # silent once after answering again: asked again
    _controller(bin_dir, UP)
    await col.refresh()
    assert col.latest["devvista"].health is not Health.OFFLINE
    kinds = [e.kind for e in await store.events_after(0)]
    assert kinds == ["site.offline", "site.online"]  # the second silence woke nobody
    assert woken == [True]


async def test_the_ping_deadline_is_the_daemons_setting(
    devvista: Site, bin_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`FEDHPC_PING_TIMEOUT_S` is the probe's ping deadline and caps the observation's: a
    controller that answers in 0.6 s is silent under 0.3 s and alive under 3 s (a loaded test
    federation is given more than the 5 s default so)."""
    _controller(bin_dir, f"sleep 0.6; {UP}")
    for given, silent in (("0.3", True), ("3", False)):
        monkeypatch.setenv("FEDHPC_PING_TIMEOUT_S", given)
        settings = DaemonSettings.from_env()
        assert settings.ping_timeout_s == float(given)
        adapter = open_adapter(devvista, ping_timeout_s=settings.ping_timeout_s)
        adapter.transport = Bash(bin_dir)
        if silent:
            with pytest.raises(ControllerSilent, match=r"within 0\.3 s"):
                await adapter.probe()
        else:
            assert (await adapter.probe()).health is not Health.OFFLINE
    assert suspect_ping_s(10.0, 3.0) == 3.0  # half a cycle, never over the probe's
    assert suspect_ping_s(2.0, 3.0) == 1.0
    assert suspect_ping_s(10.0) == 5.0  # the default
