"""draft_envelope's request; its answer is `fedhpc.placement.EnvelopeDraft`."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from fedhpc.domain.envelope import DraftSource

__all__ = ["DraftRequest"]


class DraftRequest(BaseModel):
    """A task description and code context to draft an envelope from, or bounds to record."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    description: str = Field(min_length=1, max_length=8000, description="what the task does")
    code_context: tuple[str, ...] = Field(
        default=(), max_length=32, description="code snippets or command lines (not file paths)"
    )
    proposed: dict[str, Any] | None = Field(
        default=None, description="bounds proposed by the user or the agent, as an envelope"
    )
    source: DraftSource | None = Field(
        default=None, description="who proposed them: user or assistant (default assistant)"
    )
    rationale: str = Field(default="", max_length=4000)
    confidence: float | None = Field(default=None, ge=0, le=1)
