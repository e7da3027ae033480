"""The devfed SSH front's configs (pure) and the refused-ssh-option error."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedhpc.adapters.transports.base import TransportMisconfigured
from fedhpc.adapters.transports.ssh import SshTransport
from fedhpc.domain.site import TransportSpec
from fedhpc.errors import EXIT_CODES
from fedhpc_dev.devfed import DevfedError
from fedhpc_dev.devfed.sshd import Login, login_keys_line, render_sshd_config
from fedhpc_dev.profiles import ssh_config_hosts


def test_each_login_gets_its_own_authorized_keys_by_local_port(tmp_path: Path) -> None:
    logins = [Login("devanvil", 2201, {}), Login("devdelta", 2202, {})]
    text = render_sshd_config(tmp_path, "root", logins)
    assert "AuthorizedKeysFile none\n" in text
    assert "ListenAddress 127.0.0.1:2201\nListenAddress 127.0.0.1:2202\n" in text
    assert (
        f"Match LocalPort 2202\n    AuthorizedKeysFile {tmp_path}/logins/devdelta/authorized_keys"
        in text
    )
    assert "PermitUserEnvironment SLURM_CONF" in text


def test_the_login_environment_travels_as_a_key_option() -> None:
    line = login_keys_line({"SLURM_CONF": "/var/tmp/x/slurm.conf"}, "ssh-ed25519 AAAA c")
    assert line == 'environment="SLURM_CONF=/var/tmp/x/slurm.conf" ssh-ed25519 AAAA c\n'
    with pytest.raises(DevfedError):
        login_keys_line({"SLURM_CONF": 'a",command="sh'}, "ssh-ed25519 AAAA c")
    with pytest.raises(DevfedError):
        login_keys_line({"LD_PRELOAD": "/x"}, "ssh-ed25519 AAAA c")


def test_host_aliases_are_read_from_an_ssh_config(tmp_path: Path) -> None:
    cfg = tmp_path / "ssh_config"
    cfg.write_text("Host devdelta\n  Port 1\nhost devvista other\nHost *.org !x\n")
    assert ssh_config_hosts(cfg) == {"devdelta", "devvista", "other"}
    assert ssh_config_hosts(tmp_path / "missing") == frozenset()


@pytest.mark.parametrize(
    ("option", "own"),
    [("IdentityFile", "identity_file"), ("Port", "port"), ("ConnectTimeout", "connect_timeout_s")],
)
def test_a_refused_ssh_option_names_fedhpcs_own_key(tmp_path: Path, option: str, own: str) -> None:
    spec = TransportSpec(kind="ssh", host="login.example.org", options={option: "x"})
    with pytest.raises(TransportMisconfigured) as caught:
        SshTransport(spec, state_dir=tmp_path, name="delta")
    err = caught.value
    assert err.code == "transport_config"
    assert err.message.startswith(f"delta: ssh option {option!r} is not allowed")
    assert f"fedhpc's own key for it is {own!r}" in err.message
    assert f'{own} = "..." instead of {option}' in err.hint
    assert "[sites.delta.transport.options]" in err.hint
    assert EXIT_CODES[err.kind] == 3


def test_an_option_that_runs_a_command_says_why_and_where_else_to_put_it(tmp_path: Path) -> None:
    spec = TransportSpec(kind="ssh", host="h", options={"ProxyCommand": "nc %h %p"})
    with pytest.raises(TransportMisconfigured) as caught:
        SshTransport(spec, state_dir=tmp_path, name="delta")
    assert "it runs a local command; use ProxyJump" in caught.value.message
    assert "config_file" in caught.value.hint
