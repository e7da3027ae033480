"""The boundary rule for numbers and times: finite, in range, timezone-aware, or a typed error
naming the field; probe numbers that are NaN or absurd never count as "within budget"."""

from __future__ import annotations

import contextlib
import math
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from fedhpc.collector.sanity import sanitize_state
from fedhpc.domain import Credit, Health, ResourceEnvelope, ResourceSnapshot, SiteState
from fedhpc.domain.units import (
    MAX_GROUP_CHILDREN,
    MAX_MEMORY_MIB,
    MAX_SECONDS,
    as_utc,
    parse_duration,
    parse_memory_mib,
)
from fedhpc.errors import ProfileError, ValidationFailed
from fedhpc.ops.tasks import SubmitGroupRequest, SubmitTaskRequest
from fedhpc.placement import (
    Placement,
    PlacementInputs,
    Policy,
    Settings,
    Unschedulable,
    place,
    place_group,
)
from fedhpc.placement.normalize import parse_envelope
from fedhpc.placement.ranking import whole_seconds
from fedhpc.placement.trace import Estimates
from fedhpc.profiles import load_profile, load_user_config
from tests.unit.test_placement_world import (
    NOW,
    env,
    gpu_partition,
    profile,
    site,
    snapshot,
    state,
)

ODD_FLOATS = [math.nan, math.inf, -math.inf, 1e308, 1e400, -0.0, -1.0, 5e-324]
HUGE_TEXT = ["9" * 400, "9" * 400 + "G", "1" + "0" * 5000, "inf", "nan", "-inf", "1e400"]

ALPHA = profile("alpha", gpu_partition("g", count=4))


def world(**kw: Any) -> tuple[dict[str, Any], ResourceSnapshot]:
    return {"alpha": site(ALPHA, **kw)}, snapshot(state(ALPHA, **kw.pop("_state", {})))


@pytest.mark.parametrize("value", [*ODD_FLOATS, *HUGE_TEXT, 10**400, True])
def test_memory_and_duration_parsers_raise_value_error_never_overflow(value: object) -> None:
    for parse, limit in ((parse_memory_mib, MAX_MEMORY_MIB), (parse_duration, MAX_SECONDS)):
        reason, out = "", None
        try:
            out = parse(value)
        except ValueError as exc:  # a reason, never an OverflowError or a TypeError
            reason = str(exc)
        assert reason or (out is not None and 0 <= out <= limit and value in (-0.0, 5e-324))


@given(st.one_of(st.floats(), st.integers(), st.text(max_size=60)))
@settings(max_examples=500)
def test_any_memory_or_duration_is_in_range_or_a_value_error(value: object) -> None:
    for parse, limit in ((parse_memory_mib, MAX_MEMORY_MIB), (parse_duration, MAX_SECONDS)):
        with contextlib.suppress(ValueError):
            assert 0 <= parse(value) <= limit


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("memory", {"min": "9" * 400 + "G"}),
        ("memory", {"min": math.inf}),
        ("wall_time", {"min": math.inf}),
        ("wall_time", {"min": "9" * 400 + "h"}),
        ("gpus", {"min": 10**400}),
        ("cpus", {"min": 1, "max": 10**12}),
        ("min_accelerator_memory_gib", math.nan),
        ("min_accelerator_memory_gib", math.inf),
        ("nodes", {"min": -1}),
    ],
)
def test_envelope_numbers_out_of_range_are_a_validation_error_naming_the_field(
    field: str, value: Any
) -> None:
    data: dict[str, Any] = {"gpus": {"min": 1}, field: value}
    with pytest.raises(ValidationFailed) as caught:
        parse_envelope(data)
    assert any(i.field.startswith(field) for i in caught.value.issues), caught.value.issues


def test_a_submit_request_with_inf_or_huge_numbers_is_a_validation_error() -> None:
    for envelope in ('{"memory": {"min": 1e400}}', '{"wall_time": {"min": ' + "9" * 400 + "}}"):
        body = '{"command": ["true"], "envelope": ' + envelope + "}"
        with pytest.raises(ValidationError) as caught:
            SubmitTaskRequest.model_validate_json(body)
        assert caught.value.errors()[0]["loc"][0] == "envelope"
    with pytest.raises(ValidationError):
        SubmitTaskRequest.model_validate_json(
            '{"command": ["true"], "envelope": {}, "task_budget": NaN}'
        )


def test_a_group_over_the_children_cap_is_refused_by_the_request_model() -> None:
    child = {"command": ["true"]}
    with pytest.raises(ValidationError) as caught:
        SubmitGroupRequest.model_validate(
            {"objective": "x", "envelope": {}, "children": [child] * (MAX_GROUP_CHILDREN + 1)}
        )
    assert caught.value.errors()[0]["loc"] == ("children",)


@pytest.mark.parametrize(
    "field", ["per_pending_s", "dispatch_s", "default_prepare_s", "min_staleness_s"]
)
@pytest.mark.parametrize("value", [math.inf, math.nan, 1e300])
def test_policy_settings_refuse_non_finite_and_absurd_seconds(field: str, value: float) -> None:
    with pytest.raises(ValidationError) as caught:
        Settings.model_validate({field: value})
    assert caught.value.errors()[0]["loc"] == (field,)


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan, 1e300, -0.0, 12.4])
def test_whole_seconds_ranks_infinite_and_nan_estimates_last_without_overflow(
    value: float,
) -> None:
    out = whole_seconds(value)
    assert isinstance(out, int)
    if not math.isfinite(value):
        assert out == whole_seconds(math.inf) > whole_seconds(1e9)


def test_an_infinite_runtime_estimate_sorts_last_instead_of_raising() -> None:
    from fedhpc.placement.ranking import Ranked, sort_key

    ranked = Ranked(id="a/g", site="a", partition="g", account_rank=0, queue_depth=0)
    base: dict[str, Any] = {
        "wait_s": 1.0,
        "wait_p90_s": 2.0,
        "wait_source": "x",
        "runtime_s": 1.0,
        "runtime_source": "x",
        "env_s": 0.0,
        "env_source": "x",
        "charge": 0.0,
        "charge_unit": "SU",
        "credit_fraction": 0.0,
        "waste": 0,
    }
    finite = Estimates(**base, completion_s=10.0, completion_p90_s=20.0)
    endless = Estimates(
        **{**base, "credit_fraction": math.nan},
        completion_s=math.inf,
        completion_p90_s=math.nan,
    )
    prefs = ResourceEnvelope().preferences
    assert sort_key(Policy(), ranked, finite, prefs) < sort_key(Policy(), ranked, endless, prefs)


@pytest.mark.parametrize("used", [math.nan, math.inf, -math.inf, 1e300])
def test_nan_or_absurd_usage_degrades_the_site_and_never_passes_the_credit_check(
    used: float,
) -> None:
    raw = state(ALPHA, credit=(Credit(account="proj", used=used),))
    clean = sanitize_state(raw)
    assert clean.health is Health.DEGRADED
    assert clean.error is not None and "credit of proj" in clean.error
    (row,) = clean.credit
    assert row.used is None and row.unusable and row.remaining is None
    sites = {"alpha": site(ALPHA, accounts=({"name": "proj", "budget": 0.0},))}
    for snap_state in (raw, clean):  # the raw probe too: placement itself refuses
        out = place(
            env(gpus=1, wall_time="1h"), PlacementInputs(snapshot(snap_state), sites, now=NOW)
        )
        assert isinstance(out, Unschedulable), out
        reasons = [r for c in out.reasons for r in c.reasons if r.startswith("credit")]
        assert reasons and all("cannot check the charge" in r for r in reasons)


def test_usage_zero_against_a_zero_budget_is_still_out_of_credit() -> None:
    sites = {"alpha": site(ALPHA, accounts=({"name": "proj", "budget": 0.0},))}
    snap = snapshot(state(ALPHA, credit=(Credit(account="proj", used=0.0),)))
    out = place(env(gpus=1, wall_time="1h"), PlacementInputs(snap, sites, now=NOW))
    assert isinstance(out, Unschedulable)


@pytest.mark.parametrize("budget", [math.nan, math.inf])
def test_a_non_finite_task_budget_passed_to_place_never_places(budget: float) -> None:
    sites, snap = {"alpha": site(ALPHA)}, snapshot(state(ALPHA))
    out = place(
        env(gpus=1, wall_time="1h"), PlacementInputs(snap, sites, now=NOW, task_budget=budget)
    )
    assert isinstance(out, Unschedulable)


def test_absurd_partition_counts_are_dropped_with_the_reason() -> None:
    raw = state(ALPHA, g={"free_gpus": -5})
    clean = sanitize_state(raw)
    assert clean.partitions == () and clean.health is Health.DEGRADED
    assert "free_gpus=-5" in (clean.error or "")
    out = place(
        env(gpus=1, wall_time="1h"),
        PlacementInputs(snapshot(clean), {"alpha": site(ALPHA)}, now=NOW),
    )
    assert isinstance(out, Unschedulable)
    assert any("free_gpus=-5" in r for c in out.reasons for r in c.reasons)


def test_a_sane_probe_passes_the_sanitizer_unchanged() -> None:
    s = state(ALPHA, credit=(Credit(account="proj", used=3.5, balance=100.0),))
    assert sanitize_state(s) is s


def test_naive_timestamps_are_taken_as_utc_and_the_freshness_rule_never_type_errors() -> None:
    naive_now = NOW.replace(tzinfo=None)
    fresh = state(ALPHA).model_copy(update={"collected_at": naive_now - timedelta(seconds=5)})
    sites = {"alpha": site(ALPHA)}
    for now in (NOW, naive_now):
        assert isinstance(
            place(env(gpus=1), PlacementInputs(snapshot(fresh), sites, now=now)), Placement
        )
    validated = SiteState.model_validate(
        {"site": "alpha", "health": "ok", "collected_at": "2026-11-30T12:00:00"}
    )
    assert validated.collected_at.tzinfo is UTC
    shifted = SiteState.model_validate(
        {"site": "alpha", "health": "ok", "collected_at": "2026-11-30T14:00:00+02:00"}
    )
    assert shifted.collected_at == validated.collected_at and shifted.collected_at.tzinfo is UTC


@given(
    when=st.datetimes(
        min_value=datetime(1, 1, 2),
        max_value=datetime(9999, 12, 30),
        timezones=st.one_of(st.none(), st.timezones()),
    )
)
@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
def test_any_probe_time_far_past_or_future_naive_or_aware_is_a_decision_not_an_error(
    when: datetime,
) -> None:
    s = state(ALPHA).model_copy(update={"collected_at": when})
    out = place(env(gpus=1), PlacementInputs(snapshot(s), {"alpha": site(ALPHA)}, now=NOW))
    assert isinstance(out, Placement | Unschedulable)
    if abs((as_utc(when) - NOW).total_seconds()) > 3600:
        assert isinstance(out, Unschedulable)
        assert any(r.startswith("freshness") for c in out.reasons for r in c.reasons)


_ODD_NUMBER = st.one_of(
    st.sampled_from(ODD_FLOATS),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(),
    st.sampled_from(HUGE_TEXT),
)
_FIELD = st.sampled_from(
    ["gpus", "cpus", "nodes", "memory", "wall_time", "min_accelerator_memory_gib"]
)


@given(field=_FIELD, lo=_ODD_NUMBER, hi=st.none() | _ODD_NUMBER, budget=st.none() | st.floats())
@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
def test_place_and_place_group_answer_or_raise_validation_for_any_number(
    field: str, lo: Any, hi: Any, budget: float | None
) -> None:
    data: dict[str, Any] = (
        {field: lo} if field == "min_accelerator_memory_gib" else {field: {"min": lo, "max": hi}}
    )
    sites, snap = {"alpha": site(ALPHA)}, snapshot(state(ALPHA))
    refused: ValidationFailed | None = None
    outs: list[Placement | Unschedulable] = []
    try:  # place normalizes too (unit slips such as memory 1 MiB): a typed error, or a decision
        envelope = parse_envelope(data)
        outs = [
            place(envelope, PlacementInputs(snap, sites, now=NOW, task_budget=budget)),
            *place_group(
                [envelope, envelope], PlacementInputs(snap, sites, now=NOW, task_budget=budget)
            ),
        ]
    except ValidationFailed as exc:
        refused = exc
    assert refused is None or (refused.issues and refused.issues[0].field)
    for out in outs:
        assert isinstance(out, Placement | Unschedulable)
        if isinstance(out, Placement):
            assert budget is None or (math.isfinite(budget) and out.estimates.charge <= budget)
            assert math.isfinite(out.estimates.completion_s)


_PROFILE = """name = "mine"
dialect = "slurm"
arch = "x86_64"
[charge]
kind = "node-hours"
rate = {rate}
[[partitions]]
name = "p"
max_wall_s = {wall}
[partitions.node]
cpus = {cpus}
memory_mib = {memory}
"""
_SANE = {"rate": "1.0", "wall": '"48h"', "cpus": "8", "memory": '"64G"'}


@pytest.mark.parametrize(
    ("key", "value", "field"),
    [
        ("rate", "inf", "charge.rate"),
        ("rate", "nan", "charge.rate"),
        ("wall", "1e400", "partitions.0.max_wall_s"),
        ("cpus", "9" * 30, "partitions.0.node.cpus"),
        ("memory", '"nan"', "partitions.0.node.memory_mib"),
        ("memory", "-inf", "partitions.0.node.memory_mib"),
    ],
)
def test_a_profile_with_a_non_finite_or_absurd_number_names_the_file_and_key(
    tmp_path: Path, key: str, value: str, field: str
) -> None:
    path = tmp_path / "mine.toml"
    path.write_text(_PROFILE.format(**{**_SANE, key: value}))
    with pytest.raises(ProfileError) as caught:
        load_profile(path)
    assert caught.value.key == field and str(path) in caught.value.message
    assert caught.value.kind.value == "validation"


@pytest.mark.parametrize("value", ["nan", "inf", "1e16", "-1"])
def test_a_user_config_budget_that_is_not_a_finite_credit_is_refused(
    tmp_path: Path, value: str
) -> None:
    path = tmp_path / "config.toml"
    path.write_text(f"[sites.devdelta]\nbudget = {value}\n")
    with pytest.raises(ProfileError) as caught:
        load_user_config(path)
    assert caught.value.key == "sites.devdelta.budget"


def test_inspect_federation_ages_a_naive_probe_time_without_a_type_error() -> None:
    from fedhpc.ops.inspect import inspect_federation

    naive = state(ALPHA).model_copy(update={"collected_at": NOW.replace(tzinfo=None)})
    for now in (NOW, NOW.replace(tzinfo=None)):
        view = inspect_federation({"alpha": naive}, {"alpha": site(ALPHA)}, now=now, refresh_s=60)
        (one,) = view.sites
        assert one.age_s == 0 and not one.stale
