"""Job scripts in requests: a script's header read into the request's envelope, its body as
the command, and the reading reported in the answer (what was read, what was not carried)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from fedhpc.domain.envelope import ResourceEnvelope
from fedhpc.domain.job import SafePath
from fedhpc.domain.jobscript import (
    MAX_SCRIPT_CHARS,
    JobScript,
    Scheduler,
    parse_script,
    script_command,
    script_envelope,
)

__all__ = [
    "MAX_SCRIPT_CHARS",
    "ScriptFile",
    "ScriptFileRequest",
    "ScriptReading",
    "check_script",
    "is_script_path",
    "read_script",
    "with_script",
    "with_script_draft",
]


class ScriptReading(BaseModel):
    """What fedhpc read from a job script's header, and every directive it did not carry."""

    model_config = ConfigDict(frozen=True)

    scheduler: Scheduler = Field(description="whose header it is: slurm, pbs or lsf")
    envelope: dict[str, Any] = Field(description="the envelope fields the header gave")
    not_carried: tuple[str, ...] = Field(
        default=(), description="'line N: directive: why', for each directive not carried over"
    )
    notes: tuple[str, ...] = Field(
        default=(), description="how totals became per-node figures; what the body relies on"
    )


def _reading(script: JobScript) -> ScriptReading:
    env, notes = script_envelope(script)
    return ScriptReading(
        scheduler=script.scheduler,
        envelope=env,
        not_carried=tuple(
            f"line {d.line}: {d.text}: {d.note}" for d in script.directives if d.fate != "envelope"
        ),
        notes=(*notes, *script.notes),
    )


def check_script(text: str) -> str:
    """A field validator: the text is a job script (ValueError naming why not)."""
    if is_script_path(text):
        raise ValueError(
            "a path: send the script's text (the MCP tools read a path through the daemon's "
            "POST /v1/scripts/read)"
        )
    parse_script(text)
    return text


def read_script(text: str) -> tuple[JobScript, ScriptReading]:
    """The parsed script and its reading. Raises ValueError for text that is not a script."""
    script = parse_script(text)
    return script, _reading(script)


def _given(envelope: object) -> dict[str, Any]:
    """The top-level envelope fields the caller set (they win over the header's)."""
    if isinstance(envelope, ResourceEnvelope):
        return {k: getattr(envelope, k) for k in envelope.model_fields_set}
    if isinstance(envelope, Mapping):
        return dict(envelope)
    return {}


def with_script(data: object) -> object:
    """A request's raw fields with `script` applied: its header under the caller's envelope
    (fields the caller set win), its body as `command` unless one was given, and the reading
    in `script_reading`. Data without a readable script is returned as it came (the `script`
    field's own validator names what is wrong)."""
    if not isinstance(data, dict):
        return data
    # A face passes every parameter: an absent command or envelope is "required", not null.
    absent = ("script_reading", *(k for k in ("command", "envelope") if data.get(k) is None))
    data = {k: v for k, v in data.items() if k not in absent}
    text = data.get("script")
    if not isinstance(text, str):
        return data
    try:
        script, reading = read_script(text)
    except ValueError:
        # The `script` field's validator fails this request and says why; stand-ins keep the
        # answer to that one reason instead of adding "command/envelope: Field required".
        data.setdefault("command", ("false",))
        data.setdefault("envelope", {})
        return data
    given = data.get("envelope")
    if isinstance(given, ResourceEnvelope | Mapping) or given is None:
        data["envelope"] = {**reading.envelope, **_given(given)}
    if data.get("command") is None:
        data["command"] = script_command(script)
    data["script_reading"] = reading
    return data


def with_script_draft(data: object) -> object:
    """draft_envelope's raw fields with `script` applied: its header as the proposed bounds
    (fields the caller proposed win), written by the user unless `source` says otherwise."""
    if not isinstance(data, dict):
        return data
    data = {k: v for k, v in data.items() if k != "script_reading"}
    text = data.get("script")
    if not isinstance(text, str):
        return data
    try:
        _, reading = read_script(text)
    except ValueError:
        if not data.get("description"):  # the script's own error is the answer
            data["description"] = "a job script"
        return data
    proposed = data.get("proposed")
    if isinstance(proposed, Mapping) or proposed is None:
        data["proposed"] = {**reading.envelope, **(proposed or {})}
    if not data.get("description"):
        data["description"] = f"a {reading.scheduler} job script"
    if data.get("source") is None:
        data["source"] = "user"
    data["rationale"] = _rationale(str(data.get("rationale") or ""), reading)
    data["script_reading"] = reading
    return data


def _rationale(given: str, reading: ScriptReading) -> str:
    """The caller's rationale, then what the header gave and every directive not carried
    (draft_envelope's answer has no other place for them), within the 4,000-character cap."""
    parts = [given] if given else []
    parts.append(f"read from the script's {reading.scheduler} header")
    if reading.not_carried:
        parts.append("not carried: " + "; ".join(reading.not_carried))
    parts.extend(reading.notes)
    text = ". ".join(parts)
    return text if len(text) <= 4000 else text[:3999] + "…"


def is_script_path(text: str) -> bool:
    """`script` names a file rather than holding one: a single absolute path, no directive."""
    return text.startswith("/") and "\n" not in text and "#" not in text and len(text) <= 1024


class ScriptFileRequest(BaseModel):
    """Read a job script from a site's storage root (submit_task's `script` as a path)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    path: SafePath = Field(description="absolute, inside an enabled site's storage root")


class ScriptFile(BaseModel):
    """A job script as read from a site."""

    model_config = ConfigDict(frozen=True)

    site: str
    path: str
    text: str
