"""draft_envelope's request; its answer is `fedhpc.placement.EnvelopeDraft`."""

from __future__ import annotations

from typing import Annotated, Any, Self

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from fedhpc.domain.envelope import DraftSource
from fedhpc.placement.draft import (
    MAX_CODE_CONTEXT_CHARS,
    MAX_CODE_CONTEXT_ITEMS,
    MAX_DESCRIPTION_CHARS,
)

__all__ = ["DraftRequest"]

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

    @model_validator(mode="after")
    def _total(self) -> Self:
        total = sum(len(s) for s in self.code_context)
        if total > MAX_CODE_CONTEXT_CHARS:
            raise ValueError(
                f"code_context holds {total} characters in all; at most "
                f"{MAX_CODE_CONTEXT_CHARS} (send the relevant lines, not whole files)"
            )
        return self
