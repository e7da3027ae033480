"""The shipped site profiles of real centers load, are complete, and broken files fail clearly."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedhpc.domain.site import SiteProfile
from fedhpc.errors import ProfileError
from fedhpc.profiles import (
    load_federation,
    load_profile,
    load_profiles,
    shipped_profile_dirs,
    shipped_profiles_dir,
)

REQUIRED = ("delta", "deltaai", "anvil", "vista", "perlmutter", "polaris", "sophia")
GPU_CENTERS = REQUIRED  # every required center has GPUs


def _shipped() -> dict[str, SiteProfile]:
    """Every profile an installed package ships (the dev tooling's local-test ones too)."""
    return {
        p.stem: load_profile(p) for d in shipped_profile_dirs() for p in sorted(d.glob("*.toml"))
    }


def _real() -> list[SiteProfile]:
    return [p for p in _shipped().values() if not p.local_test]


def _ids(profiles: list[SiteProfile]) -> list[str]:
    return [p.name for p in profiles]


# A small valid profile; the broken cases below each change one thing.
GOOD = """\
name = "{name}"
dialect = "slurm"
arch = "x86_64"
docs = ["https://example.org/guide"]
min_refresh_s = 60

[charge]
kind = "node-hours"

[[partitions]]
name = "batch"
max_wall_s = "1h"
[partitions.node]
cpus = 8
memory_mib = "16G"
"""


def test_every_shipped_profile_loads() -> None:
    profiles = _shipped()
    assert profiles
    for stem, profile in profiles.items():
        assert profile.name == stem


def test_the_seven_required_centers_are_shipped() -> None:
    missing = set(REQUIRED) - set(_shipped())
    assert not missing, f"missing shipped profiles: {sorted(missing)}"


def test_load_profiles_returns_the_shipped_centers_without_user_folders() -> None:
    assert set(REQUIRED) <= set(load_profiles())


@pytest.mark.parametrize("profile", _real(), ids=_ids(_real()))
def test_real_profile_cites_https_documentation(profile: SiteProfile) -> None:
    assert profile.docs, f"{profile.name} has no docs URLs"
    assert all(url.startswith("https://") for url in profile.docs)


@pytest.mark.parametrize("profile", _real(), ids=_ids(_real()))
def test_real_profile_is_polled_no_more_than_once_a_minute(profile: SiteProfile) -> None:
    assert profile.min_refresh_s >= 60


@pytest.mark.parametrize("profile", _real(), ids=_ids(_real()))
def test_real_profile_has_positive_wall_caps_and_sane_node_limits(profile: SiteProfile) -> None:
    for part in profile.partitions:
        assert part.max_wall_s > 0, part.name
        assert part.min_nodes_per_job <= part.max_nodes_per_job, part.name
        if part.default_wall_s is not None:
            assert part.default_wall_s <= part.max_wall_s, part.name
        if part.default_qos is not None:
            assert part.default_qos in part.qos, part.name


@pytest.mark.parametrize("profile", _real(), ids=_ids(_real()))
def test_real_gpu_center_has_a_placeable_gpu_partition_with_type_and_memory(
    profile: SiteProfile,
) -> None:
    if profile.name not in GPU_CENTERS:
        pytest.skip("not a GPU center")
    gpu = [
        p
        for p in profile.partitions
        if p.node.accelerator is not None and p.name not in profile.blocked_partitions
    ]
    assert gpu, f"{profile.name} has no placeable GPU partition"
    for part in gpu:
        acc = part.node.accelerator
        assert acc is not None
        assert acc.type and acc.memory_gib > 0 and acc.count >= 1


@pytest.mark.parametrize("profile", _real(), ids=_ids(_real()))
def test_real_profile_blocks_only_partitions_it_defines(profile: SiteProfile) -> None:
    names = {p.name for p in profile.partitions}
    assert set(profile.blocked_partitions) <= names
    assert any(p.name not in profile.blocked_partitions for p in profile.partitions)


@pytest.mark.parametrize("profile", _real(), ids=_ids(_real()))
def test_real_profile_blocks_its_interactive_and_debug_partitions(profile: SiteProfile) -> None:
    for part in profile.partitions:
        if "interactive" in part.name or part.name.endswith("debug") or part.name == "debug":
            assert part.name in profile.blocked_partitions, f"{profile.name}:{part.name}"


@pytest.mark.parametrize("profile", _real(), ids=_ids(_real()))
def test_real_profile_reaches_a_login_host_over_ssh_without_a_user(profile: SiteProfile) -> None:
    assert profile.transport.kind == "ssh"
    assert profile.transport.host
    assert profile.transport.user is None


def test_perlmutter_models_constraints_as_gpu_and_cpu_partitions_with_regular_qos() -> None:
    perlmutter = _shipped()["perlmutter"]
    for name in ("gpu", "cpu"):
        part = perlmutter.partition(name)
        assert part.default_qos == "regular"
        assert "shared" in part.qos
    assert perlmutter.conventions.qos_required
    assert perlmutter.containers.gpu_flag == "--gpu"
    assert perlmutter.containers.exec_template.startswith("podman-hpc run")


def test_vista_rejects_memory_requests_and_charges_whole_nodes() -> None:
    vista = _shipped()["vista"]
    assert vista.conventions.memory_request is False
    assert vista.charge.whole_node
    assert {"gh", "gg", "gh-dev"} <= {p.name for p in vista.partitions}


def test_anvil_has_the_h100_ai_partition_and_the_a100_gpu_partition() -> None:
    anvil = _shipped()["anvil"]
    ai = anvil.partition("ai").node.accelerator
    gpu = anvil.partition("gpu").node.accelerator
    assert ai is not None and ai.type == "h100" and ai.memory_gib == 80
    assert gpu is not None and gpu.type == "a100" and gpu.memory_gib == 40
    assert anvil.conventions.balance_command == ("mybalance",)


def test_alcf_systems_use_pbs_queues() -> None:
    shipped = _shipped()
    assert shipped["polaris"].dialect == "pbs"
    assert {"debug", "debug-scaling", "prod", "preemptable"} <= {
        p.name for p in shipped["polaris"].partitions
    }
    assert shipped["sophia"].dialect == "pbs"


BROKEN = {
    "unknown key": (
        GOOD.replace("min_refresh_s = 60", "min_refresh_s = 60\ncolour = 'blue'"),
        "colour",
        "Extra inputs are not permitted",
    ),
    "wrong type": (
        GOOD.replace("cpus = 8", 'cpus = "eight"'),
        "partitions.0.node.cpus",
        "valid integer",
    ),
    "partition name with a space": (
        GOOD.replace('name = "batch"', 'name = "my batch"'),
        "partitions.0.name",
        "is not a valid name",
    ),
    "bad duration": (
        GOOD.replace('max_wall_s = "1h"', 'max_wall_s = "forever"'),
        "partitions.0.max_wall_s",
        "cannot read",
    ),
    "blocked partition that does not exist": (
        GOOD.replace('dialect = "slurm"', 'dialect = "slurm"\nblocked_partitions = ["nope"]'),
        "(top level)",
        "blocked_partitions names unknown partitions",
    ),
    "max nodes below the minimum of one": (
        GOOD.replace('max_wall_s = "1h"', 'max_wall_s = "1h"\nmax_nodes_per_job = 0'),
        "partitions.0.max_nodes_per_job",
        "greater than or equal to 1",
    ),
    "negative memory": (
        GOOD.replace('memory_mib = "16G"', "memory_mib = -5"),
        "partitions.0.node.memory_mib",
        "negative",
    ),
    "toml syntax": (GOOD + "\n[[partitions\n", "(syntax)", ""),
}


@pytest.mark.parametrize("case", list(BROKEN), ids=list(BROKEN))
def test_broken_profile_raises_one_line_error_naming_file_key_and_reason(
    tmp_path: Path, case: str
) -> None:
    text, key, reason = BROKEN[case]
    path = tmp_path / "broken.toml"
    path.write_text(text.format(name="broken") if "{name}" in text else text)
    with pytest.raises(ProfileError) as info:
        load_profile(path)
    err = info.value
    message = str(err)
    assert "\n" not in message
    assert str(path) in message
    assert err.path == str(path)
    assert err.key == key
    assert key in message
    assert reason in err.reason


def test_profile_whose_name_differs_from_its_file_name_is_rejected(tmp_path: Path) -> None:
    path = tmp_path / "alpha.toml"
    path.write_text(GOOD.format(name="beta"))
    with pytest.raises(ProfileError) as info:
        load_profile(path)
    assert info.value.key == "name"
    assert "alpha.toml" in str(info.value)


def test_broken_profile_in_a_user_folder_fails_the_whole_load(tmp_path: Path) -> None:
    folder = tmp_path / "profiles"
    folder.mkdir()
    (folder / "mine.toml").write_text(GOOD.format(name="mine").replace("cpus = 8", "cpus = -1"))
    with pytest.raises(ProfileError) as info:
        load_profiles([folder])
    assert info.value.key == "partitions.0.node.cpus"
    assert "mine.toml" in str(info.value)


def test_user_config_adds_accounts_budget_and_login_to_delta_without_editing_it(
    tmp_path: Path,
) -> None:
    shipped_text = (shipped_profiles_dir() / "delta.toml").read_text()
    config = tmp_path / "config.toml"
    config.write_text(
        """\
[sites.delta]
budget = 500.0

[[sites.delta.accounts]]
name = "bbka-delta-gpu"
partitions = ["gpuA100x4", "gpuA40x4"]
budget = 400.0

[[sites.delta.accounts]]
name = "bbka-delta-cpu"
partitions = ["cpu"]

[sites.delta.transport]
user = "alice"
host = "dt-login03.delta.ncsa.illinois.edu"
"""
    )
    sites = load_federation(config_path=config)
    assert set(sites) == {"delta"}
    delta = sites["delta"]
    assert delta.transport.user == "alice"
    assert delta.transport.host == "dt-login03.delta.ncsa.illinois.edu"
    assert delta.transport.kind == "ssh"
    assert delta.user.budget == 500.0
    assert [a.name for a in delta.user.accounts] == ["bbka-delta-gpu", "bbka-delta-cpu"]
    assert delta.user.accounts[0].budget == 400.0
    # the shipped profile is untouched and still has no user
    assert delta.profile.transport.user is None
    assert delta.profile.transport.host == "login.delta.ncsa.illinois.edu"
    assert (shipped_profiles_dir() / "delta.toml").read_text() == shipped_text


def test_user_config_from_fedhpc_config_env_enables_only_named_sites(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "elsewhere.toml"
    config.write_text('[sites.anvil]\n[sites.anvil.transport]\nuser = "x-alice"\n')
    monkeypatch.setenv("FEDHPC_CONFIG", str(config))
    sites = load_federation()
    assert set(sites) == {"anvil"}
    assert sites["anvil"].transport.user == "x-alice"
    assert sites["anvil"].transport.host == "anvil.rcac.purdue.edu"


def test_user_config_naming_an_unknown_site_is_a_profile_error(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text("[sites.nowhere]\n")
    with pytest.raises(ProfileError) as info:
        load_federation(config_path=config)
    assert info.value.key == "sites.nowhere"
    assert str(config) in str(info.value)
