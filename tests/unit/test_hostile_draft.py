"""draft_envelope and parse_envelope under hostile text: limits checked before parsing, huge
numbers answered with valid=False, any unicode answered (never raised). Their speed is measured
by benchmarks/hostile.py, not asserted here."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from fedhpc.domain.units import MAX_GROUP_CHILDREN
from fedhpc.errors import ValidationFailed
from fedhpc.ops.draft import DraftRequest, EnvelopeDraft, draft_envelope
from fedhpc.placement import parse_envelope
from fedhpc.placement.draft import (
    MAX_CODE_CONTEXT_CHARS,
    MAX_CODE_CONTEXT_ITEMS,
    MAX_DESCRIPTION_CHARS,
)
from tests.unit.test_placement_world import gpu_partition, profile

PROFILES = [profile("alpha", gpu_partition("g"))]

# Right-to-left override, NUL, a lone surrogate, Cyrillic and fullwidth look-alikes of ASCII,
# zero-width joiners, combining marks.
ODD_TEXT = [
    "train on 4 gpus \u202eruoh 2\u202c",
    "torchrun --nproc_per_node=4\x00 x.py",
    "inference \ud800 model",
    "t\u043erchrun --nnodes=2 (Cyrillic o)",
    "\uff24\uff24\uff30 \uff54\uff52\uff41\uff49\uff4e 8 hours",
    "sweep\u200d of 10\u200b configs",
    "7B\u0301 model inference",
    "",
]


def _check(d: EnvelopeDraft) -> None:
    assert d.valid == (d.envelope is not None)
    if not d.valid:
        assert d.issues and all(i.field and i.reason for i in d.issues)
    assert 0.0 <= d.confidence <= 1.0


@pytest.mark.parametrize(
    "text",
    [
        "9" * MAX_DESCRIPTION_CHARS,
        "1." * (MAX_DESCRIPTION_CHARS // 2),
        "9" * 400 + " hours of training",
        "9" * 400 + "B model inference",
        "torchrun --nproc_per_node=" + "9" * 5000,
        "num_workers=" + "9" * 5000 + " pandas",
        "1" + "0" * 4400 + " hours",
        "0" * 7000 + "4 hours",
        "9" * 17 + ".5 minutes",
    ],
)
def test_long_digit_runs_and_huge_numbers_answer_never_raise(text: str) -> None:
    d = draft_envelope(text[:MAX_DESCRIPTION_CHARS], profiles=PROFILES)
    _check(d)


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("9" * 400 + " hours of training", "wall_time"),
        ("torchrun --nproc_per_node=" + "9" * 400, "gpus"),
        ("9" * 400 + "B model inference", "min_accelerator_memory_gib"),
    ],
)
def test_huge_numbers_in_the_text_make_the_draft_invalid_naming_the_field(
    text: str, field: str
) -> None:
    d = draft_envelope(text)
    assert not d.valid
    assert any(i.field.startswith(field) for i in d.issues), d.issues


def test_a_sweep_asking_for_more_runs_than_a_group_holds_says_so() -> None:
    d = draft_envelope("hyperparameter sweep over " + "9" * 400 + " configs")
    assert d.valid and d.fanout == MAX_GROUP_CHILDREN
    assert "several groups" in d.rationale


@pytest.mark.parametrize(
    ("description", "code", "field"),
    [
        ("x" * (MAX_DESCRIPTION_CHARS + 1), (), "description"),
        ("x", ("y",) * (MAX_CODE_CONTEXT_ITEMS + 1), "code_context"),
        ("x", ("y" * (MAX_CODE_CONTEXT_CHARS // 2 + 1),) * 2, "code_context"),
    ],
)
def test_text_over_the_limits_is_refused_before_parsing_naming_the_field(
    description: str, code: tuple[str, ...], field: str
) -> None:
    with pytest.raises(ValidationFailed) as caught:
        draft_envelope(description, code)
    assert [i.field for i in caught.value.issues] == [field]
    with pytest.raises(ValidationError) as err:
        DraftRequest(description=description, code_context=code)
    assert err.value.errors()[0]["loc"][:1] in {(field,), ()}


def test_text_at_the_limits_is_accepted() -> None:
    code = ("torch.distributed " * 100,) * 2 + ("z" * (MAX_CODE_CONTEXT_CHARS - 3600),)
    req = DraftRequest(description="d" * MAX_DESCRIPTION_CHARS, code_context=code)
    _check(draft_envelope(req.description, req.code_context))


@pytest.mark.parametrize("text", ODD_TEXT)
def test_odd_unicode_is_drafted_or_refused_by_field_never_raised(text: str) -> None:
    if not text:
        with pytest.raises(ValidationError):
            DraftRequest(description=text)
    _check(draft_envelope(text, (text,), profiles=PROFILES))


_UNICODE = st.text(
    alphabet=st.characters(codec=None, exclude_categories=()), max_size=300
) | st.sampled_from(ODD_TEXT)


@given(description=_UNICODE, code=st.lists(_UNICODE, max_size=4))
@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
def test_any_unicode_text_gives_a_draft(description: str, code: list[str]) -> None:
    _check(draft_envelope(description, code, profiles=PROFILES))


@given(
    digits=st.integers(min_value=1, max_value=6000),
    unit=st.sampled_from([" hours", "B model", " configs sweep", " minutes", "h", ""]),
    prefix=st.sampled_from(["", "--nproc_per_node=", "num_workers=", "Pool(", "x"]),
)
@settings(max_examples=100, deadline=None)
def test_any_digit_run_length_gives_a_draft(digits: int, unit: str, prefix: str) -> None:
    _check(draft_envelope((prefix + "7" * digits + unit)[:MAX_DESCRIPTION_CHARS]))


_VALUE = st.one_of(
    st.none(),
    st.booleans(),
    st.floats(),
    st.integers(min_value=-(10**40), max_value=10**40),
    st.text(max_size=40),
    st.sampled_from(["inf", "NaN", "9" * 400 + "G", "-0.0", "1e400"]),
)
_KEYS = st.sampled_from(
    [
        "gpus",
        "cpus",
        "memory",
        "nodes",
        "wall_time",
        "min_accelerator_memory_gib",
        "accelerator_types",
        "sites_include",
        "container",
        "preferences",
        "\u202egpus",
        "gpus\x00",
    ]
)


@given(
    data=st.dictionaries(
        _KEYS,
        _VALUE | st.fixed_dictionaries({"min": _VALUE, "max": _VALUE}) | st.lists(_VALUE),
        max_size=4,
    )
)
@settings(max_examples=500, suppress_health_check=[HealthCheck.too_slow])
def test_parse_envelope_and_a_proposed_draft_answer_or_name_the_field(data: Any) -> None:
    issues: list[Any] = []
    try:
        parse_envelope(data)
    except ValidationFailed as exc:
        issues = exc.issues or [None]
    assert all(i is not None and i.field for i in issues)
    _check(draft_envelope("check my bounds", proposed=data, profiles=PROFILES))
