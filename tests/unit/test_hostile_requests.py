"""Requests a careless agent sends, refused with a field and a fix (never a silent fallback),
and answers that stay true in every state."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from fedhpc.domain import AccountConfig, UserConfig, UserSiteConfig
from fedhpc.domain.config import Site
from fedhpc.ops.data import DataLocation, TransferOptions, TransferState
from fedhpc.ops.inspect import InspectRequest, inspect_federation
from fedhpc.ops.sitecheck import SiteNotUsable
from fedhpc.ops.tasks import ReplanRequest, SubmitGroupRequest, SubmitTaskRequest
from fedhpc.profiles import load_federation
from fedhpc.transfer.records import TransferRecord

T0 = datetime(2026, 12, 1, 7, 0, tzinfo=UTC)


@pytest.fixture
def sites(monkeypatch: pytest.MonkeyPatch) -> dict[str, Site]:
    monkeypatch.setenv("FEDHPC_DEVFED", "1")
    accounts = (AccountConfig(name="fedhpc-gpu"),)
    config = UserConfig(
        sites={s: UserSiteConfig(accounts=accounts) for s in ("devdelta", "devvista")}
    )
    return {k: v for k, v in load_federation(config).items() if k in {"devdelta", "devvista"}}


def test_inspect_with_a_mistyped_site_is_an_error_naming_the_sites(
    sites: dict[str, Site],
) -> None:
    """An empty list of sites would read as "nothing free there", not as a typo."""
    req = InspectRequest(sites=("devdelta", "devdleta"))
    with pytest.raises(SiteNotUsable) as err:
        inspect_federation({}, sites, now=T0, refresh_s=60, request=req)
    body = err.value.as_dict()
    assert body["code"] == "site_not_usable"
    assert body["fields"] == [{"field": "sites[1]", "reason": "no site is called 'devdleta'"}]
    assert "devdelta, devvista" in body["hint"]
    ok = inspect_federation(
        {}, sites, now=T0, refresh_s=60, request=req.model_copy(update={"sites": ("devdelta",)})
    )
    assert [s.site for s in ok.sites] == ["devdelta"]


def _group(**extra: object) -> SubmitGroupRequest:
    return SubmitGroupRequest.model_validate(
        {"objective": "sweep", "children": [{"command": ["true"]}], "envelope": {}, **extra}
    )


def test_a_group_with_policy_fixed_site_is_refused_on_the_policy_field() -> None:
    """A group has no fixed_site: the daemon used to refuse each child as '(body): Value error'."""
    with pytest.raises(ValidationError) as err:
        _group(policy="fixed-site")
    (issue,) = err.value.errors()
    assert issue["loc"] == ("policy",)
    assert "envelope.sites_include" in issue["msg"]
    assert _group(policy="shortest-queue").policy.value == "shortest-queue"


def test_a_group_with_two_children_of_one_name_is_refused() -> None:
    with pytest.raises(ValidationError) as err:
        _group(
            children=[
                {"command": ["a"], "name": "x"},
                {"command": ["b"]},
                {"command": ["c"], "name": "x"},
            ]
        )
    (issue,) = err.value.errors()
    assert issue["loc"] == ("children",)
    assert "children[2].name 'x' is also children[0]'s name" in issue["msg"]
    assert len(_group(children=[{"command": ["a"]}, {"command": ["b"]}]).children) == 2


def _transfer(state: TransferState, **extra: object) -> TransferRecord:
    where = DataLocation(site="devdelta", root="scratch", root_path="/s", path="/s/a")
    return TransferRecord(
        id="x123",
        idempotency_key="k",
        mode="replicate",
        source_ref="devdelta:scratch/a",
        destination_ref="devdelta:scratch/b",
        source=where,
        destination=where,
        options=TransferOptions(),
        backend="local",
        state=state,
        created_at=T0,
        **extra,
    )


@pytest.mark.parametrize("state", list(TransferState))
def test_a_transfer_read_later_never_says_end_your_turn(state: TransferState) -> None:
    """The resource fedhpc://transfers/{id} said "Accepted. End your turn: fedhpc ... resumes
    you" in every state, even succeeded or failed, to whichever session read it."""
    view = _transfer(state).view()
    assert "End your turn" not in view.next
    assert "resumes you" not in view.next
    if state is TransferState.SUCCEEDED:
        assert view.next.startswith("Succeeded") and "stage_in" in view.next
    elif state is TransferState.FAILED:
        assert view.next.startswith("Failed") and "`error`" in view.next
    else:
        assert view.next.startswith(f"Still {state.value}")
        assert "fedhpc://transfers/x123" in view.next


def test_a_blocked_transfer_read_later_says_a_person_must_act() -> None:
    from fedhpc.ops.data import TransferIssue

    blocked = TransferIssue(code="consent_required", message="log in", hint="fedhpc login")
    view = _transfer(TransferState.QUEUED, blocked=blocked).view()
    assert view.next.startswith("Blocked: `blocked` says what a person must do")


@pytest.mark.parametrize(
    ("text", "wall_min"),
    [
        ("train for 1e400 hours", 3600),  # was read as '400 hours'
        ("train for 1E+3 hours", 3600),  # was '3 hours'
        ("preprocess for -5 hours", 3600),  # was '5 hours'
        ("preprocess for 1.5 hours", 5400),
        ("preprocess for 2-5 hours", 18000),  # a range: its upper end, as before
    ],
)
def test_the_drafter_never_reads_part_of_a_number_as_the_duration(text: str, wall_min: int) -> None:
    from fedhpc.ops.draft import draft_envelope

    draft = draft_envelope(text)
    assert draft.proposed["wall_time"]["min"] == wall_min, draft.rationale
    if wall_min == 3600:  # unreadable: the class default, and the rationale says so
        assert "default wall time" in draft.rationale
        assert "stated duration" not in draft.rationale


def test_the_drafter_never_reads_an_exponent_as_a_model_size() -> None:
    from fedhpc.ops.draft import draft_envelope

    assert "'9B model'" not in draft_envelope("1e9B model inference").rationale
    assert "'7B model'" in draft_envelope("7B model inference").rationale


def test_the_server_instructions_never_say_end_your_turn_unconditionally() -> None:
    """Sent at initialize to every client, also to one nothing will ever resume."""
    from fedhpc.mcp_server import INSTRUCTIONS

    step = INSTRUCTIONS.split("\n4. ")[1].split("\n5. ")[0]
    assert "`next`" in step and "end your turn when fedhpc will resume you" in step
    assert not step.startswith("Yield: end your turn")


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("a" * (1 << 20), "at most 128 characters, not 1048576"),
        ("dev delta", "'dev delta' is not a site name"),
        ("x\x1b]0;owned\x07", "is not a site name"),
        ("", "is not a site name"),
    ],
)
def test_a_site_name_that_cannot_be_a_site_is_refused_by_field_and_kept_short(
    name: str, says: str
) -> None:
    """A 1 MiB name in inspect_federation answered `internal` (the URL's query was too long);
    the answer never echoes the whole name."""
    for build, field in (
        (lambda n: InspectRequest(sites=("devdelta", n)), ("sites", 1)),
        (
            lambda n: ReplanRequest(task_id="t1", exclude_sites=("devdelta", n)),
            ("exclude_sites", 1),
        ),
        (lambda n: SubmitTaskRequest(command=("x",), envelope={}, fixed_site=n), ("fixed_site",)),
    ):
        with pytest.raises(ValidationError) as err:
            build(name)
        (issue,) = err.value.errors()
        assert issue["loc"] == field
        assert says in issue["msg"] and len(issue["msg"]) < 300
    assert InspectRequest(sites=("devdelta", "dev-vista_2.x+")).sites[1] == "dev-vista_2.x+"


@pytest.mark.parametrize(
    ("image", "says"),
    [
        ("img\x1b]0;owned\x07", "contains U+001B"),
        ("img\x00", "contains U+0000"),
        ("img\u202etxt", "RIGHT-TO-LEFT OVERRIDE"),
        ("my image.sif", "contains U+0020 (SPACE)"),
        ("--bind=/:/host", "starts with '-'"),
    ],
)
def test_a_container_image_with_control_characters_is_refused_at_submit(
    image: str, says: str
) -> None:
    """Accepted, then the task failed as "internal: ValidationError" (NUL, at dispatch) or the
    ESC reached the job script; a leading '-' would be read by the runtime as its option."""
    env = {"container": {"image": image}}
    inside = ("envelope", "container", "image")  # the field itself, exactly
    for build, field in (
        (lambda: _task(container_image=image), ("container_image",)),
        (lambda: _task(envelope=env), inside),
        (lambda: _group(envelope=env), inside),
        (lambda: ReplanRequest.model_validate({"task_id": "t1", "envelope": env}), inside),
    ):
        with pytest.raises(ValidationError) as err:
            build()
        (issue,) = err.value.errors()
        assert issue["loc"] == field
        assert says in issue["msg"]
    ok = "docker://ghcr.io/org/img:1.2@sha256:abc"
    assert _task(container_image=ok).container_image == ok
    assert _task(envelope={"container": {"image": "/sw/x.sif"}}).envelope.container is not None


def _task(**extra: object) -> SubmitTaskRequest:
    return SubmitTaskRequest.model_validate({"command": ["true"], "envelope": {}, **extra})
