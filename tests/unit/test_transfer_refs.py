"""Logical data references: parsing, resolution against profiles and the user's config, and
typed errors for traversal, unknown sites, roots and collections."""

from __future__ import annotations

import subprocess
import sys

import pytest

from fedhpc.domain.config import Site, UserSiteConfig
from fedhpc.errors import FedError
from fedhpc.profiles import load_profiles
from fedhpc.transfer import choose_backend, locate, parse_ref, resolve

DELTA_WORK = "6f1e3c2a-0000-4000-8000-00000000d001"
POLARIS_EAGLE = "6f1e3c2a-0000-4000-8000-00000000e001"


@pytest.fixture
def sites() -> dict[str, Site]:
    profiles = load_profiles()
    return {
        "delta": Site(profiles["delta"], UserSiteConfig(collections={"work": DELTA_WORK})),
        "polaris": Site(profiles["polaris"], UserSiteConfig()),
        "devanvil": Site(profiles["devanvil"], UserSiteConfig()),
        "devdeltaai": Site(profiles["devdeltaai"], UserSiteConfig()),
    }


def _code(exc: pytest.ExceptionInfo[FedError]) -> str:
    return exc.value.code


def test_a_reference_resolves_to_site_root_collection_and_absolute_path(
    sites: dict[str, Site],
) -> None:
    loc = resolve("delta:work/proj/run1/out.dat", sites, need_collection=True)
    assert (loc.site, loc.root, loc.collection_id) == ("delta", "work", DELTA_WORK)
    assert loc.path == "/work/hdd/proj/run1/out.dat"
    assert loc.root_path == "/work/hdd"


def test_redundant_segments_are_normalised_and_the_bare_root_is_the_root_folder(
    sites: dict[str, Site],
) -> None:
    assert parse_ref("delta:work//a/./b/") == ("delta", "work", "a/b")
    assert resolve("delta:work", sites).path == "/work/hdd"


@pytest.mark.parametrize(
    "ref",
    [
        "delta:work/../../etc/passwd",
        "delta:work/a/../../b",
        "delta:work/..",
        "delta:work/a/\nb",
        "delta:work/-rf",
    ],
)
def test_a_path_that_could_leave_its_root_is_a_path_traversal_error(
    sites: dict[str, Site], ref: str
) -> None:
    with pytest.raises(FedError) as exc:
        resolve(ref, sites)
    assert _code(exc) == "path_traversal"


@pytest.mark.parametrize(
    ("ref", "code"),
    [
        ("nowhere:work/a", "unknown_site"),
        ("delta:nosuchroot/a", "unknown_root"),
        ("/etc/passwd", "bad_data_ref"),
        ("delta", "bad_data_ref"),
    ],
)
def test_unknown_sites_roots_and_malformed_references_have_typed_errors(
    sites: dict[str, Site], ref: str, code: str
) -> None:
    with pytest.raises(FedError) as exc:
        resolve(ref, sites)
    assert _code(exc) == code


def test_a_globus_transfer_from_a_root_without_collection_is_an_unknown_collection_error(
    sites: dict[str, Site],
) -> None:
    with pytest.raises(FedError) as exc:
        resolve("polaris:eagle/proj/x", sites, need_collection=True)
    assert _code(exc) == "unknown_collection"
    assert "collections" in exc.value.hint
    assert resolve("polaris:eagle/proj/x", sites).collection_id is None


def test_the_users_collection_id_wins_over_the_profiles(sites: dict[str, Site]) -> None:
    profiles = load_profiles()
    base = profiles["delta"]
    root = base.storage[0].model_copy(update={"collection_id": "from-profile"})
    site = Site(
        base.model_copy(update={"storage": (root, *base.storage[1:])}),
        UserSiteConfig(collections={root.name: "from-user"}),
    )
    assert resolve(f"delta:{root.name}/x", {"delta": site}).collection_id == "from-user"
    bare = Site(site.profile, UserSiteConfig())
    assert resolve(f"delta:{root.name}/x", {"delta": bare}).collection_id == "from-profile"


def test_an_absolute_task_output_is_located_in_the_longest_matching_root(
    sites: dict[str, Site],
) -> None:
    loc = locate(sites["delta"], "/work/nvme/proj/out.dat")
    assert loc.root == "work-nvme"
    with pytest.raises(FedError) as exc:
        locate(sites["delta"], "/etc/passwd")
    assert _code(exc) == "outside_root"


def test_local_test_sites_use_the_local_backend_and_real_sites_use_globus(
    sites: dict[str, Site],
) -> None:
    assert choose_backend(sites["devanvil"], sites["devdeltaai"]) == "local"
    assert choose_backend(sites["delta"], sites["polaris"]) == "globus"
    with pytest.raises(FedError) as exc:
        choose_backend(sites["devanvil"], sites["delta"])
    assert _code(exc) == "unsupported_route"


def test_resolving_references_loads_no_io_library_and_the_daemon_no_globus_sdk() -> None:
    probe = (
        "import sys, fedhpc.transfer.refs; a = set(sys.modules);"
        "import fedhpc.transfer.service; b = set(sys.modules);"
        "print(sorted(m for m in ('anyio', 'aiosqlite', 'structlog', 'globus_sdk') if m in a));"
        "print('globus_sdk' in b)"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout.split("\n")
    assert out[:2] == ["[]", "False"]
