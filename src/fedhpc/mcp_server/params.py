"""Parameter types shared by the tools, with compact advertised schemas.

The envelope and the adaptation policy validate as the contract's models (`ResourceEnvelope`,
`AdaptationPolicy`), but advertise an object whose description names their fields: the
generated schema is ~2.3 KB and would appear in three tools. A unit test keeps the names in step
with the models."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, WithJsonSchema

from fedhpc.domain.envelope import ResourceEnvelope
from fedhpc.ops.tasks import AdaptationPolicy
from fedhpc.placement.policy import PolicyKind

__all__ = [
    "ADAPTATION_SCHEMA",
    "ENVELOPE_SCHEMA",
    "ID_PATTERN",
    "Adapt",
    "Argv",
    "Env",
    "Envelope",
    "GroupAdapt",
    "GroupEnvelope",
    "GroupPolicy",
    "IdemKey",
    "OptArgv",
    "OptEnvelope",
    "OtherEnvelope",
    "Policy",
    "Script",
    "TaskId",
    "Workdir",
]

# The envelope is advertised as an object whose description names every field (issue 36: its
# typed schema was ~1.2 KB of the 6 KB model-read budget). It validates in full as
# `ResourceEnvelope` (field-named errors, "did you mean" for a misspelt key); draft_envelope
# writes one, and the fedhpc-envelopes skill shows one whole.
ENVELOPE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": (
        "{min: viable, max: useful} of nodes, wall_time (s or '2h') and, per node, gpus, cpus, "
        "memory (MiB or '64G'); lists accelerator_types (a100, ...), architectures, "
        "sites_include, sites_exclude; min_accelerator_memory_gib, container {image}, "
        "preferences, draft. Skill fedhpc-envelopes"
    ),
}

ADAPTATION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": (
        "budgets: max_retries, max_wall_extensions, wall_factor, replace_pending, "
        "replace_after_s, replace_margin_s, max_replacements, hedge_copies, hedge_min_gain_s"
    ),
}

Envelope = Annotated[ResourceEnvelope, WithJsonSchema(ENVELOPE_SCHEMA)]
# With a job script, the envelope and the command may come from it (ops/scripts.py).
OptEnvelope = Annotated[ResourceEnvelope | None, WithJsonSchema(ENVELOPE_SCHEMA)]
Script = Annotated[str | None, Field(description="#SBATCH/#PBS/#BSUB script or its path")]
GroupEnvelope = Annotated[ResourceEnvelope, WithJsonSchema({"type": "object"})]
OtherEnvelope = Annotated[
    ResourceEnvelope | None,
    WithJsonSchema({"type": "object", "description": "as in submit_task"}),
]
Adapt = Annotated[AdaptationPolicy | None, WithJsonSchema(ADAPTATION_SCHEMA)]
GroupAdapt = Annotated[AdaptationPolicy | None, WithJsonSchema({"type": "object"})]
Argv = Annotated[list[str], Field(min_length=1, description="argv, verbatim (no shell)")]
OptArgv = Annotated[list[str] | None, Field(min_length=1, description="argv, verbatim (no shell)")]
# Ids are a prefix and hex digits; the pattern also keeps '/', '?' and control characters out
# of the daemon's URL paths.
ID_PATTERN = r"^[A-Za-z0-9_-]+$"
# Validated in full; advertised as a plain string (the pattern cost ~60 B in three tools).
TaskId = Annotated[
    str,
    Field(min_length=1, max_length=64, pattern=ID_PATTERN),
    WithJsonSchema({"type": "string"}),
]
Policy = PolicyKind | None
# A group names no site: fixed-site is not offered (sent anyway, the request model says why).
GroupPolicy = Annotated[
    PolicyKind,
    WithJsonSchema({"enum": ["best-feasible", "shortest-queue"], "type": "string"}),
]
Workdir = Annotated[str | None, Field(description="in the task folder or a storage root")]
Env = dict[str, str]
# An empty key is refused, not read as "no key" (it would lose the retry window's protection).
# The 200-character cap is left to the request models (a typed error names it): advertised in
# three tools it cost ~75 bytes of the model-read budget for a limit no agent key comes near.
# The name says what it does (same key, same work); the skills give the retry window.
IdemKey = Annotated[str | None, Field(min_length=1)]
