"""Validation at the door: what placement will require of a request is checked when the request
is accepted (a task, a group, a replan), so a request placement would refuse is a typed error
for the caller who sent it, never a row that fails later in a loop shared by every session."""

from __future__ import annotations

from collections.abc import Mapping

from fedhpc.domain.config import Site
from fedhpc.domain.envelope import ResourceEnvelope
from fedhpc.errors import FieldIssue, ValidationFailed
from fedhpc.placement.normalize import normalize_envelope

__all__ = ["check_envelope"]


def check_envelope(
    envelope: ResourceEnvelope, sites: Mapping[str, Site], *, field: str = "envelope"
) -> None:
    """Raise `ValidationFailed` naming each field of `envelope` placement would refuse against
    the configured `sites` (unit slips, unknown accelerators, sites and preferred partitions,
    an empty runtime list); each field is named under `field` as the caller wrote it."""
    try:
        normalize_envelope(envelope, (s.profile for s in sites.values()), sites=sites.keys())
    except ValidationFailed as exc:
        issues = [FieldIssue(f"{field}.{i.field}", i.reason) for i in exc.issues]
        raise ValidationFailed(issues, hint=exc.hint) from None
