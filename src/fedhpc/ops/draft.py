"""draft_envelope: its request, its answer, and the pure function that answers it.

User- and agent-authored drafts are validated and recorded as given; with no draft, the
heuristic in `fedhpc.placement.draft` classifies the workload from signals in the text. An
invalid draft comes back with `valid=False` and per-field issues: a draft is a proposal."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Annotated, Any, Self

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    model_validator,
)

from fedhpc.domain.envelope import DraftInfo, DraftSource, ResourceEnvelope
from fedhpc.domain.site import SiteProfile
from fedhpc.errors import ValidationFailed
from fedhpc.ops.scripts import MAX_SCRIPT_CHARS, ScriptReading, check_script, with_script_draft
from fedhpc.placement.draft import (
    MAX_CODE_CONTEXT_CHARS,
    MAX_CODE_CONTEXT_ITEMS,
    MAX_DESCRIPTION_CHARS,
    Workload,
    check_inputs,
    heuristic_draft,
)
from fedhpc.placement.normalize import normalize_envelope, parse_envelope

__all__ = ["DraftIssue", "DraftRequest", "EnvelopeDraft", "draft_envelope"]

Snippet = Annotated[str, StringConstraints(max_length=MAX_CODE_CONTEXT_CHARS)]


class DraftRequest(BaseModel):
    """A task description and code context to draft an envelope from, or bounds to record."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    description: str = Field(
        min_length=1, max_length=MAX_DESCRIPTION_CHARS, description="what the task does"
    )
    code_context: tuple[Snippet, ...] = Field(
        default=(),
        max_length=MAX_CODE_CONTEXT_ITEMS,
        description=(
            f"code snippets or command lines (not file paths); at most "
            f"{MAX_CODE_CONTEXT_CHARS} characters in all"
        ),
    )
    proposed: dict[str, Any] | None = Field(
        default=None, description="bounds proposed by the user or the agent, as an envelope"
    )
    source: DraftSource | None = Field(
        default=None, description="who proposed them: user or assistant (default assistant)"
    )
    rationale: str = Field(default="", max_length=4000)
    confidence: float | None = Field(default=None, ge=0, le=1)
    script: Annotated[str, AfterValidator(check_script)] | None = Field(
        default=None,
        max_length=MAX_SCRIPT_CHARS,
        description="a #SBATCH, #PBS or #BSUB job script: its header is read as `proposed` "
        "(the fields `proposed` sets win), written by the user",
    )
    script_reading: ScriptReading | None = Field(
        default=None, description="set by fedhpc from `script`: what its header gave"
    )

    @model_validator(mode="before")
    @classmethod
    def _script(cls, data: object) -> object:
        return with_script_draft(data)

    @model_validator(mode="after")
    def _total(self) -> Self:
        total = sum(len(s) for s in self.code_context)
        if total > MAX_CODE_CONTEXT_CHARS:
            raise ValueError(
                f"code_context holds {total} characters in all; at most "
                f"{MAX_CODE_CONTEXT_CHARS} (send the relevant lines, not whole files)"
            )
        return self


class DraftIssue(BaseModel):
    model_config = ConfigDict(frozen=True)

    field: str
    reason: str


class EnvelopeDraft(BaseModel):
    """The draft as proposed, the normalized envelope (None when invalid), and why."""

    model_config = ConfigDict(frozen=True)

    source: DraftSource
    heuristic: bool
    workload: Workload | None
    proposed: dict[str, Any]
    envelope: ResourceEnvelope | None
    rationale: str
    confidence: float
    signals: tuple[str, ...]
    fanout: int | None = None  # parameter sweeps: how many children the text suggests
    valid: bool
    issues: tuple[DraftIssue, ...] = ()


def _issues(exc: ValidationFailed) -> tuple[DraftIssue, ...]:
    return tuple(DraftIssue(field=i.field, reason=i.reason) for i in exc.issues)


def draft_envelope(
    description: str,
    code_context: Sequence[str] = (),
    proposed: ResourceEnvelope | Mapping[str, Any] | None = None,
    *,
    source: DraftSource | None = None,
    rationale: str = "",
    confidence: float | None = None,
    profiles: Iterable[SiteProfile] = (),
    sites: Collection[str] | None = None,
) -> EnvelopeDraft:
    """A draft from `proposed` (user- or agent-authored) or, without one, from the heuristic.
    `code_context` items are snippets (the caller reads files). Invalid drafts come back with
    `valid=False` and per-field issues rather than raising: a draft is a proposal. Text over
    the input limits raises `ValidationFailed` before any parsing."""
    check_inputs(description, code_context)
    profiles = list(profiles)
    workload: Workload | None = None
    signals: tuple[str, ...] = ()
    fanout: int | None = None
    if proposed is not None:
        src = source or DraftSource.ASSISTANT
        heuristic = False
        raw = (
            proposed.model_dump(mode="json", exclude_none=True)
            if isinstance(proposed, ResourceEnvelope)
            else dict(proposed)
        )
        conf = confidence if confidence is not None else (1.0 if src is DraftSource.USER else 0.5)
        why = rationale or ("as written by the user" if src is DraftSource.USER else "as proposed")
    else:
        src, heuristic = DraftSource.HEURISTIC, True
        guess = heuristic_draft(description, code_context)
        workload, raw, signals, fanout = guess.workload, guess.proposed, guess.signals, guess.fanout
        conf = confidence if confidence is not None else guess.confidence
        why = f"{rationale}; {guess.rationale}" if rationale else guess.rationale
    conf = min(max(conf, 0.0), 1.0)
    info = DraftInfo(source=src, rationale=why[:4000], confidence=conf)
    envelope: ResourceEnvelope | None = None
    issues: tuple[DraftIssue, ...] = ()
    try:
        parsed = parse_envelope({k: v for k, v in raw.items() if k != "draft"})
        envelope = normalize_envelope(parsed, profiles, sites=sites).model_copy(
            update={"draft": info}
        )
    except ValidationFailed as exc:
        issues = _issues(exc)
    return EnvelopeDraft(
        source=src,
        heuristic=heuristic,
        workload=workload,
        proposed=raw,
        envelope=envelope,
        rationale=why,
        confidence=conf,
        signals=signals,
        fanout=fanout,
        valid=envelope is not None,
        issues=issues,
    )
