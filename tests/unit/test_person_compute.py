"""A Globus Compute site marked `identity = "person"` (service mode, issue 34 item 3): each
person's commands reach Globus Compute with that person's own token, from the facade's real
sealed store, refreshed through the facade's own refresh path. The real SDK Client against
`globus_sdk.testing` registered responses; the Compute service's submit answer is chosen by
the token it is sent (an endpoint that allows some people and refuses others)."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anyio
import pytest
import responses
import structlog
from globus_sdk.testing import load_response
from requests import PreparedRequest

from fedhpc.adapters.command import Command
from fedhpc.adapters.transports import make_transport
from fedhpc.adapters.transports.base import TransportUnavailable
from fedhpc.adapters.transports.globus_compute import GlobusComputeTransport
from fedhpc.cli.service import site_identities
from fedhpc.domain.config import Site
from fedhpc.domain.site import TransportSpec
from fedhpc.globus_auth import apps as auth_apps
from fedhpc.globus_auth.people import PersonNotAuthorized, acting_for, install
from fedhpc.orchestrator.people import refused_sites
from fedhpc.service.people import FacadeTokens, people_from_config
from tests.unit.person_tokens_world import (
    ALICE,
    BOB,
    CAROL,
    DAVE,
    canary,
    facade_tokens,
    sign_in,
)
from tests.unit.test_placement_world import cpu_partition, profile, site

ENDPOINT = "4b116d3c-1703-4f8f-9f6f-39921e5864df"
SUBMIT = f"https://compute.api.globus.org/v3/endpoints/{ENDPOINT}/submit"
SPEC = TransportSpec(
    kind="globus-compute",
    endpoint_id=ENDPOINT,
    options={"poll_min_s": "0.05", "poll_max_s": "0.2", "queue_timeout_s": "60"},
)
SITES: dict[str, Site] = {
    "alpha": site(profile("alpha", cpu_partition("cpu")), identity="person"),
    "beta": site(profile("beta", cpu_partition("cpu"))),
}


@pytest.fixture
def compute() -> Iterator[str]:
    """The Compute web service: functions register for anyone; the endpoint takes tasks from
    everyone but CAROL, whose identity it refuses (403). The function id is yielded."""
    responses.start()
    try:
        function_id = load_response("compute.v3.register_function").metadata["function_id"]

        def submit(request: PreparedRequest) -> tuple[int, dict[str, str], str]:
            if request.headers.get("Authorization") == f"Bearer {canary(CAROL, 'compute')}":
                body = {"code": "ENDPOINT_ACCESS_FORBIDDEN", "error_args": [], "reason": "no"}
                return 403, {"content-type": "application/json"}, json.dumps(body)
            tasks = {function_id: [str(uuid.uuid4())]}
            body = {"request_id": "r", "task_group_id": "g", "endpoint_id": ENDPOINT}
            return 200, {"content-type": "application/json"}, json.dumps({**body, "tasks": tasks})

        responses.add_callback(responses.POST, SUBMIT, callback=submit)
        yield function_id
    finally:
        responses.stop()
        responses.reset()
        auth_apps.reset()


@pytest.fixture
async def people(tmp_path: Path) -> AsyncIterator[FacadeTokens]:
    """ALICE, BOB and CAROL signed in granting Compute; DAVE without that consent. The
    provider refuses BOB's Compute refresh token (he revoked fedhpc's consent there)."""
    tokens = facade_tokens(tmp_path, refused=frozenset({canary(BOB, "compute-refresh")}))
    for who in (ALICE, CAROL):
        await sign_in(tokens, who)
    await sign_in(tokens, BOB, expires_in=60)  # within the refresh margin: refreshed first
    await sign_in(tokens, DAVE, compute=False)
    install(tokens)
    try:
        yield tokens
    finally:
        install(None)
        await tokens.aclose()


def _alpha(tmp_path: Path) -> GlobusComputeTransport:
    """alpha's transport as the daemon opens a per-person site's."""
    transport = make_transport(SPEC, state_dir=tmp_path, name="alpha", per_person=True)
    assert isinstance(transport, GlobusComputeTransport)
    return transport


def _authorizations(since: int = 0) -> list[str]:
    return [str(c.request.headers.get("Authorization")) for c in responses.calls[since:]]


async def test_each_persons_task_reaches_compute_with_their_own_token(
    compute: str, people: FacadeTokens, tmp_path: Path
) -> None:
    transport = _alpha(tmp_path)
    with acting_for(ALICE):
        await transport.submit(Command(("echo", "alice's")))
    alices = _authorizations()
    # register_function, then submit: both as ALICE, none with anyone else's token
    assert len(alices) == 2
    assert set(alices) == {f"Bearer {canary(ALICE, 'compute')}"}
    with acting_for(CAROL), pytest.raises(PersonNotAuthorized) as refused:
        await transport.submit(Command(("echo", "carol's")))
    carols = _authorizations(len(alices))
    assert set(carols) == {f"Bearer {canary(CAROL, 'compute')}"}
    assert "endpoint refused your authorization (HTTP 403)" in refused.value.message
    # The endpoint's refusal takes alpha out of CAROL's candidates, and nobody else's.
    assert "its endpoint refused" in (await refused_sites(CAROL, SITES))["alpha"]
    assert await refused_sites(ALICE, SITES) == {}


async def test_a_person_without_compute_consent_is_refused_before_any_request(
    compute: str, people: FacadeTokens, tmp_path: Path
) -> None:
    transport = _alpha(tmp_path)
    with acting_for(DAVE), pytest.raises(PersonNotAuthorized) as caught:
        await transport.submit(Command(("true",)))
    assert _authorizations() == []  # not even a function registration
    assert caught.value.code == "person_not_authorized"
    assert "did not grant Globus Compute" in caught.value.message
    assert "Sign in to fedhpc again through your MCP client" in caught.value.hint
    why = (await refused_sites(DAVE, SITES))["alpha"]
    assert "sign in to fedhpc again through your MCP client, granting Globus Compute" in why
    assert "beta" not in await refused_sites(DAVE, SITES)  # the service's own identity there


async def test_a_refused_refresh_takes_the_site_out_of_that_persons_candidates_only(
    compute: str, people: FacadeTokens, tmp_path: Path
) -> None:
    transport = _alpha(tmp_path)
    assert await refused_sites(BOB, SITES) == {}  # signed in, not refreshed yet
    with acting_for(BOB), pytest.raises(PersonNotAuthorized):
        await transport.submit(Command(("true",)))
    assert _authorizations() == []  # nothing reached Compute: no usable token
    assert "refused to refresh" in (await refused_sites(BOB, SITES))["alpha"]
    # The refusal is kept in the store (the endpoint's process sees it too) until BOB signs
    # in again, and never spends his refresh token a second time.
    assert await people.facade.refresh_upstream(BOB) is False
    with acting_for(ALICE):
        await transport.submit(Command(("true",)))
    assert set(_authorizations()) == {f"Bearer {canary(ALICE, 'compute')}"}
    await sign_in(people, BOB)
    assert await refused_sites(BOB, SITES) == {}


async def test_a_due_token_is_refreshed_through_the_facade_and_the_new_one_used(
    compute: str, tmp_path: Path
) -> None:
    tokens = facade_tokens(tmp_path)
    await sign_in(tokens, ALICE, expires_in=60)
    install(tokens)
    try:
        transport = _alpha(tmp_path)
        with acting_for(ALICE):
            await transport.submit(Command(("true",)))
    finally:
        install(None)
        await tokens.aclose()
    assert set(_authorizations()) == {f"Bearer renewed-{canary(ALICE, 'compute-refresh')}"}


async def test_no_token_reaches_a_log_or_an_error(
    compute: str, people: FacadeTokens, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    transport = _alpha(tmp_path)
    errors: list[str] = []
    with structlog.testing.capture_logs() as logs:
        for who in (ALICE, BOB, CAROL, DAVE):
            with acting_for(who):
                try:
                    await transport.submit(Command(("true",)))
                except PersonNotAuthorized as exc:
                    errors += [str(exc), repr(exc), json.dumps(exc.as_dict())]
        for who in (ALICE, BOB, CAROL, DAVE):
            errors += list((await refused_sites(who, SITES)).values())
    assert len(errors) > 6
    texts = [repr(logs), caplog.text, *errors]
    for who in (ALICE, BOB, CAROL, DAVE):
        for what in ("auth", "compute", "transfer"):
            for value in (canary(who, what), canary(who, f"{what}-refresh")):
                assert not any(value in text for text in texts), (who, what)


def test_person_identity_needs_a_globus_compute_site(tmp_path: Path) -> None:
    ssh = TransportSpec(kind="ssh", host="login.example.org")
    with pytest.raises(TransportUnavailable, match="needs a globus-compute transport"):
        make_transport(ssh, state_dir=tmp_path, per_person=True)


def test_service_check_names_per_person_sites_and_their_problems() -> None:
    gc = profile("alpha", cpu_partition("cpu"), transport=SPEC)
    sites = {
        "alpha": site(gc, identity="person"),
        "delta": site(profile("delta", cpu_partition("cpu")), identity="person"),
    }
    ids = {i.site: i for i in site_identities(sites, facade=True)}
    assert ids["alpha"].problem is None
    assert ids["alpha"].runs_as == f"each person's own Globus Compute sign-in, endpoint {ENDPOINT}"
    assert "needs a globus-compute transport" in str(ids["delta"].problem)
    (alpha,) = site_identities({"alpha": sites["alpha"]})  # no [service.facade]
    assert "needs [service.facade]" in str(alpha.problem)


async def test_two_processes_sharing_the_store_refresh_a_person_once(tmp_path: Path) -> None:
    """The endpoint and the daemon both refresh through the facade: a rotating refresh token
    must be spent once, whichever asks first (the store's refresh lease)."""
    spent: list[str] = []
    endpoint = facade_tokens(tmp_path, spent=spent)
    daemon = facade_tokens(tmp_path, spent=spent)
    await sign_in(endpoint, ALICE, expires_in=60)  # every set due
    try:
        async with anyio.create_task_group() as tg:
            for facade in (endpoint.facade, daemon.facade):
                tg.start_soon(facade.refresh_upstream, ALICE)
        assert sorted(spent) == sorted(
            canary(ALICE, f"{what}-refresh") for what in ("auth", "transfer", "compute")
        )
        assert await daemon.access_token(ALICE, "compute") == "renewed-" + canary(
            ALICE, "compute-refresh"
        )
    finally:
        await endpoint.aclose()
        await daemon.aclose()


async def test_the_service_daemon_holds_the_facades_tokens_only_with_a_facade(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = tmp_path / "secret"
    secret.write_text("s3cret\n")
    secret.chmod(0o600)
    config = tmp_path / "config.toml"
    service = (
        '[service]\nissuer = "https://auth.globus.org"\n'
        'resource = "https://fedhpc.example.org/mcp"\nallowed_domains = ["lab.example"]\n'
    )
    config.write_text(service)
    monkeypatch.setenv("FEDHPC_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("FEDHPC_CONFIG", str(config))
    assert people_from_config() is None  # no facade: nobody's tokens
    config.write_text(
        service + f'[service.facade]\nclient_id = "fedhpc"\nclient_secret_file = "{secret}"\n'
    )
    tokens = people_from_config()
    assert tokens is not None
    try:
        await sign_in(tokens, ALICE)  # the endpoint's store: the same file under the home
        assert (tmp_path / "home" / "facade" / "facade.db").exists()
        assert await tokens.access_token(ALICE, "compute") == canary(ALICE, "compute")
    finally:
        await tokens.aclose()
