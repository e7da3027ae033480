"""The running federation matches the devfed profiles, accounts work, `up` is idempotent."""

from __future__ import annotations

import os
import signal
from contextlib import suppress

import pytest

from fedhpc.domain.units import parse_duration
from fedhpc.profiles import load_profiles
from fedhpc_dev.devfed import manager
from tests.integration.conftest import Devfed

pytestmark = pytest.mark.devfed


def test_four_clusters_answer_sinfo(devfed: Devfed) -> None:
    assert devfed.sites == ("devanvil", "devdelta", "devdeltaai", "devvista")
    for site in devfed.sites:
        out = devfed.run(site, "sinfo", "-h", "-o", "%R")
        assert out.returncode == 0, out.stderr
        profile = load_profiles()[site]
        assert set(out.stdout.split()) == {p.name for p in profile.partitions}


def test_partition_gpus_caps_and_arch_match_the_profiles(devfed: Devfed) -> None:
    for site in devfed.sites:
        profile = load_profiles()[site]
        out = devfed.run(site, "sinfo", "-h", "-N", "-o", "%R|%N|%G|%c|%m|%l|%f")
        assert out.returncode == 0, out.stderr
        rows = [line.split("|") for line in out.stdout.splitlines()]
        for spec in profile.partitions:
            mine = [r for r in rows if r[0] == spec.name]
            assert len(mine) == spec.node.count, (site, spec.name)
            acc = spec.node.accelerator
            gpus = 0
            for _, _, gres, cpus, mem, limit, features in mine:
                assert int(cpus) == spec.node.cpus
                assert int(mem) == spec.node.memory_mib
                assert parse_duration(limit) == spec.max_wall_s
                assert features == profile.arch_of(spec.name).value
                if acc:
                    kind, gtype, count = gres.split("(")[0].split(":")
                    assert (kind, gtype) == ("gpu", acc.gres_type)
                    gpus += int(count)
                else:
                    assert gres == "(null)"
            assert gpus == (acc.count * spec.node.count if acc else 0), (site, spec.name)


def test_every_cluster_has_both_accounts_for_root(devfed: Devfed) -> None:
    out = devfed.run(
        devfed.sites[0], "sacctmgr", "-n", "-P", "show", "assoc", "format=Cluster,Account,User"
    )
    assert out.returncode == 0, out.stderr
    assoc = {tuple(line.split("|")) for line in out.stdout.splitlines()}
    for site in devfed.sites:
        for account in ("fedhpc-cpu", "fedhpc-gpu"):
            assert (site, account, "root") in assoc


def test_an_unknown_account_is_rejected_at_submit(devfed: Devfed) -> None:
    out = devfed.run(
        "devdelta",
        "sbatch",
        "-A",
        "no-such-account",
        "-p",
        "cpu",
        "-t",
        "1",
        "-o",
        "/dev/null",
        "--wrap",
        "true",
    )
    assert out.returncode != 0
    assert "account" in out.stderr.lower()


def test_a_job_over_the_wall_cap_is_rejected_at_submit(devfed: Devfed) -> None:
    out = devfed.run(
        "devvista",
        "sbatch",
        "-A",
        "fedhpc-gpu",
        "-p",
        "gh-dev",
        "-t",
        "3:00:00",
        "-o",
        "/dev/null",
        "--wrap",
        "true",
    )
    assert out.returncode != 0
    assert "time limit" in out.stderr.lower()


def test_sacct_and_sshare_answer(devfed: Devfed) -> None:
    for argv in (["sacct", "-X", "-n", "-P", "-o", "JobID,State"], ["sshare", "-n", "-P"]):
        out = devfed.run("devanvil", *argv)
        assert out.returncode == 0, out.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can run `devfed up`")
def test_up_again_is_a_no_op(devfed: Devfed) -> None:
    report = manager.up(manager.default_plan(), timeout_s=60)
    assert report.started == []
    assert report.registered == []


def test_status_reports_every_node_healthy(devfed: Devfed) -> None:
    state = manager.status(manager.default_plan())
    assert state.healthy, state
    assert {c.name for c in state.clusters} == set(devfed.sites)


def test_up_replaces_a_controller_that_runs_but_does_not_answer(devfed: Devfed) -> None:
    """A SIGTERM'd slurmctld can stay alive for minutes saving its state (its slurmdbd
    messages timing out) and answer nothing. `up` counted its live pid as running, and the
    cluster was left without a controller once it exited (every later test lost the site).
    Now `up` stops a controller that does not answer its ping and starts a fresh one."""
    from tests.unit.test_cli import _run  # the installed CLI, as a user runs it

    pid_file = devfed.root / "devvista" / "run" / "slurmctld.pid"
    old = devfed.controller_pid("devvista")
    os.kill(old, signal.SIGSTOP)  # alive, silent: as a controller busy shutting down
    try:
        up = _run("devfed", "up")
    finally:
        with suppress(ProcessLookupError):
            os.kill(old, signal.SIGCONT)
    assert up.returncode == 0, up.stdout + up.stderr
    assert int(pid_file.read_text().split()[0]) != old
    ping = devfed.run("devvista", "scontrol", "ping")
    assert " is UP" in ping.stdout, ping.stdout + ping.stderr
