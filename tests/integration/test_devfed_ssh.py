"""The devfed SSH front: each cluster is a login host behind a real sshd, Slurm found by the
login's own environment, and fedhpc reaches it with its ssh transport."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fedhpc.domain.site import Health
from fedhpc.profiles import load_federation
from fedhpc_dev.devfed.sshd import SshFront
from tests.integration.conftest import Devfed
from tests.integration.daemon_util import running

pytestmark = [pytest.mark.devfed, pytest.mark.sshd]


def _ssh(front: SshFront, alias: str, *remote: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["ssh", "-F", str(front.ssh_config), "-o", "BatchMode=yes", alias, "--", *remote],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_each_login_host_points_slurm_at_its_own_cluster(
    devfed_ssh: SshFront, devfed: Devfed
) -> None:
    for site in devfed.sites:
        out = _ssh(devfed_ssh, site, "printenv", "SLURM_CONF")
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == str(devfed.conf(site))
        # ... and Slurm itself answers for that cluster, with nothing sent by the client.
        name = _ssh(devfed_ssh, site, "scontrol", "show", "config")
        assert f"ClusterName             = {site}" in name.stdout


def test_the_dev_sites_load_with_an_ssh_transport_that_sends_no_slurm_conf(
    over_ssh: SshFront,
) -> None:
    sites = load_federation()
    for name, site in sites.items():
        spec = site.transport
        assert (spec.kind, spec.host) == ("ssh", name)
        assert spec.options == {"config_file": str(over_ssh.ssh_config)}
        assert "SLURM_CONF" not in spec.env


def test_fedhpc_probe_reaches_a_cluster_over_ssh(over_ssh: SshFront) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "fedhpc.cli.main", "probe", "devdelta", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    (state,) = json.loads(out.stdout)
    assert state["site"] == "devdelta"
    assert state["health"] != "offline", state["error"]
    parts = {p["name"]: p for p in state["partitions"]}
    assert parts["gpuA100x4"]["total_gpus"] == 4
    assert "fedhpc-gpu" in state["accounts"]


def test_fedhpc_probe_reports_every_site_when_one_has_a_refused_ssh_option(
    over_ssh: SshFront, isolated_home: Path
) -> None:
    """The four clusters over sshd, devdelta's profile with an ssh option fedhpc refuses: the
    other three are still probed and printed; devdelta's typed error and its fix on stderr;
    the exit status is that error's (3), with no traceback."""
    (isolated_home / "config.toml").write_text(
        f'[sites.devdelta.transport.options]\nIdentityFile = "{over_ssh.client_key}"\n'
    )
    argv = [sys.executable, "-m", "fedhpc.cli.main", "probe"]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 3, out.stdout + out.stderr
    assert "Traceback" not in out.stderr
    heads = [ln for ln in out.stdout.splitlines() if not ln.startswith(" ")]
    assert heads[1] == "devdelta: failed  error[transport_config] (on stderr)", out.stdout
    others = [h for i, h in enumerate(heads) if i != 1]
    assert [h.split(":")[0] for h in others] == ["devanvil", "devdeltaai", "devvista"]
    assert all(h.split()[1] == "ok" for h in others), out.stdout
    assert "gpus free" in out.stdout  # their partitions, read through sshd
    err = out.stderr.splitlines()
    assert err[0].startswith(
        "error[transport_config]: devdelta: ssh option 'IdentityFile' is not allowed"
    ), out.stderr
    assert err[1].startswith('hint: Write identity_file = "..." instead of IdentityFile')

    as_json = subprocess.run(
        [*argv, "--json"], capture_output=True, text=True, timeout=120, check=False
    )
    assert as_json.returncode == 3, as_json.stderr
    entries = {e["site"]: e for e in json.loads(as_json.stdout)}
    assert entries["devdelta"]["error"]["code"] == "transport_config"
    assert {entries[s]["health"] for s in ("devanvil", "devdeltaai", "devvista")} == {"ok"}


async def test_a_refused_ssh_option_takes_only_its_site_offline_with_the_fix(
    over_ssh: SshFront, tmp_path: Path
) -> None:
    home = tmp_path / "h"
    home.mkdir()
    (home / "config.toml").write_text(
        f'[sites.devdelta.transport.options]\nIdentityFile = "{over_ssh.client_key}"\n'
    )
    async with running(home) as client:
        views = {s.site: s for s in (await client.refresh()).sites}
    broken = views.pop("devdelta")
    assert broken.health is Health.OFFLINE
    assert broken.error is not None
    assert "devdelta: ssh option 'IdentityFile' is not allowed" in broken.error
    assert 'Write identity_file = "..." instead of IdentityFile' in broken.error
    assert {s.health for s in views.values()} == {Health.OK}  # the daemon kept the others
