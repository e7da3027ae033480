"""inspect_federation's accelerator filter: a type nobody knows ('a1000') is a typed error
naming the known types; a known type no enabled site offers is still an empty answer."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from fedhpc.domain import AccountConfig, UserConfig, UserSiteConfig
from fedhpc.domain.config import Site
from fedhpc.ops.inspect import InspectRequest, UnknownAccelerator, inspect_federation
from fedhpc.profiles import load_federation

T0 = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)


@pytest.fixture
def sites(monkeypatch: pytest.MonkeyPatch) -> dict[str, Site]:
    monkeypatch.setenv("FEDHPC_DEVFED", "1")
    accounts = (AccountConfig(name="fedhpc-gpu"),)
    config = UserConfig(
        sites={s: UserSiteConfig(accounts=accounts) for s in ("devdelta", "devvista")}
    )
    return {k: v for k, v in load_federation(config).items() if k in {"devdelta", "devvista"}}


def _view(sites: dict[str, Site], accelerator: str) -> list[str]:
    req = InspectRequest(accelerator=accelerator)
    view = inspect_federation({}, sites, now=T0, refresh_s=60, request=req)
    return [s.site for s in view.sites]


def test_a_mistyped_accelerator_is_an_error_naming_the_known_types(
    sites: dict[str, Site],
) -> None:
    """It answered an empty federation, which reads as "none free", not as a typo."""
    with pytest.raises(UnknownAccelerator) as err:
        _view(sites, "a1000")
    body = err.value.as_dict()
    assert body["code"] == "unknown_accelerator"
    assert body["fields"] == [
        {"field": "accelerator", "reason": "no accelerator type is called 'a1000'"}
    ]
    assert "The enabled sites offer: a100, a40, gh200." in body["hint"]
    assert "h100" in body["hint"] and "drop accelerator" in body["hint"]


def test_a_known_type_is_read_in_any_case_and_one_no_site_offers_is_empty(
    sites: dict[str, Site],
) -> None:
    assert _view(sites, " A100") == ["devdelta"]
    assert _view(sites, "GH200") == ["devvista"]
    # A real model no enabled site has: the empty answer is true, and the name is no typo.
    assert _view(sites, "h100") == []
