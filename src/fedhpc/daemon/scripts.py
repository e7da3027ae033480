"""A job script named by its path: read from the storage root of the site that holds it."""

from __future__ import annotations

from fedhpc.adapters.site import CommandFailed
from fedhpc.adapters.transports.base import TransportError
from fedhpc.daemon.state import DaemonState
from fedhpc.errors import FieldIssue, ValidationFailed
from fedhpc.globus_auth.errors import GlobusLoginRequired
from fedhpc.globus_auth.people import acting_for
from fedhpc.ops.scripts import MAX_SCRIPT_CHARS, ScriptFile
from fedhpc.ops.workdir import outside_message, sites_holding
from fedhpc.orchestrator.people import per_person

__all__ = ["ScriptUnread", "read_script_file"]


class ScriptUnread(ValidationFailed):
    """`script` names a file no enabled site's storage root holds, or one that cannot be read."""

    code = "script_unread"
    default_hint = "Pass the script's text as `script`, or a path inside a site's storage root."


async def read_script_file(state: DaemonState, path: str, owner: str | None = None) -> ScriptFile:
    """The script at `path` from the first site (by name) whose storage root holds it and can
    read it: at most `MAX_SCRIPT_CHARS` bytes (one more is refused, never cut). A site that
    runs each person as themselves reads it as `owner` (the caller), never as the service."""
    profiles = {n: s.profile for n, s in state.collector.sites.items()}
    holding = sorted(sites_holding(path, profiles.values()))
    if not holding:
        raise ScriptUnread([FieldIssue("script", outside_message(path, profiles))])
    why = []
    for site in holding:
        reader = owner if per_person(state.collector.sites.get(site)) else None
        try:
            with acting_for(reader):
                text, cut = await state.collector.adapters[site].head(path, MAX_SCRIPT_CHARS)
        except (CommandFailed, TransportError, GlobusLoginRequired) as exc:
            why.append(f"{site}: {exc.message}")
            continue
        if cut:
            reason = f"{path} on {site} is over {MAX_SCRIPT_CHARS} bytes: not a job script"
            raise ScriptUnread([FieldIssue("script", reason)])
        return ScriptFile(site=site, path=path, text=text)
    raise ScriptUnread([FieldIssue("script", f"cannot read {path}: {'; '.join(why)}")])
