"""Where discovery writes: the user's folders only; a shipped profile is never shadowed unless
asked; an existing config entry is never changed; a shipped center reached another way keeps
that way in the person's config."""

from __future__ import annotations

from pathlib import Path

from fedhpc.adapters.dialects.slurm_discover import parse_discovery
from fedhpc.domain.site import TransportSpec
from fedhpc.onboard.build import Discovery, build_discovery
from fedhpc.onboard.discover import write_discovery
from fedhpc.profiles import load_profile, load_user_config
from fedhpc_dev.profiles import dev_profiles_dir
from tests.unit.test_discover_slurm import _devvista

SSH = TransportSpec(kind="ssh", host="vista-alias", user="me", options={"port": "2222"})


def _found(name: str, spec: TransportSpec = SSH) -> Discovery:
    return build_discovery(parse_discovery(_devvista()), name=name, transport=spec)


def test_shipped_center_is_kept_and_reached_my_way(tmp_path: Path) -> None:
    before = (dev_profiles_dir() / "devvista.toml").read_text()
    out = write_discovery(
        _found("devvista"), config_path=tmp_path / "c.toml", profiles_dir=tmp_path / "p"
    )
    assert (dev_profiles_dir() / "devvista.toml").read_text() == before
    assert out.profile_path == tmp_path / "p" / "discovered" / "devvista.toml"
    assert out.profile_loaded is False and out.diff == ()
    assert "use --override" in out.notes[0]  # devvista ships as local; this was ssh
    site = load_user_config(tmp_path / "c.toml").sites["devvista"]
    assert (site.transport.host, site.transport.user) == ("vista-alias", "me")
    assert site.transport.options == {"port": "2222"}
    assert [a.name for a in site.accounts] == ["fedhpc-cpu", "fedhpc-gpu"]


def test_override_puts_it_where_it_is_loaded(tmp_path: Path) -> None:
    out = write_discovery(
        _found("devvista"),
        override=True,
        config_path=tmp_path / "c.toml",
        profiles_dir=tmp_path / "p",
    )
    assert out.profile_path == tmp_path / "p" / "devvista.toml" and out.profile_loaded


def test_existing_entry_and_other_lines_are_left_alone(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    text = '# mine\nprofile_dirs = ["~/p"]\n\n[sites.newsite]\nuser = "old"\n'
    config.write_text(text)
    out = write_discovery(_found("newsite"), config_path=config, profiles_dir=tmp_path / "p")
    assert out.config_written is False and config.read_text() == text
    assert "[[sites.newsite.accounts]]" in out.config_entry
    assert load_profile(out.profile_path).name == "newsite"
    other = write_discovery(_found("second"), config_path=config, profiles_dir=tmp_path / "p")
    assert other.config_written and config.read_text().startswith(text)
    loaded = load_user_config(config)
    assert loaded.sites["newsite"].user == "old" and loaded.sites["second"].user == "root"
