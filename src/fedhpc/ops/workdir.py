"""Where a task runs: `workdir` confined to the task's folder or a site's storage roots (pure).

Relative paths resolve under the task's own folder on the site; absolute ones must lie inside
one of the site's declared storage roots (a profile that lets jobs use home declares a `home`
root). `~` is never expanded: a batch directive would take it literally."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from fedhpc.domain.site import SiteProfile
from fedhpc.errors import FieldIssue, ValidationFailed

__all__ = [
    "WorkdirOutside",
    "check_workdir",
    "inside",
    "outside_message",
    "resolve_workdir",
    "sites_holding",
]

_FIX = (
    "Give workdir relative to the task's folder (e.g. 'run1'), or an absolute path inside a "
    "storage root of the site (the message lists them)."
)


def check_workdir(path: str) -> str:
    """The syntax every site agrees on; raises ValueError (a validation error on `workdir`)."""
    if path.startswith("~"):
        raise ValueError(
            "'~' is not expanded by batch schedulers: give a path relative to the task's folder, "
            "or an absolute path inside a storage root"
        )
    if "//" in path:
        raise ValueError("empty path component ('//'): a path like //server/share is not a folder")
    if path.strip("/.") == "":
        raise ValueError(
            f"{path!r} is not a folder for a job: omit workdir for the task's own folder"
        )
    rel = path if path.startswith("/") else path.removeprefix("./")
    if ".." in rel.split("/"):
        raise ValueError("'..' would leave the task's folder or storage root")
    if "." in rel.rstrip("/").split("/"):
        raise ValueError("'.' components are ambiguous: write the path without them")
    return rel.rstrip("/")


def inside(path: str, root: str) -> bool:
    root = root.rstrip("/") or "/"
    return path == root or path.startswith(root + "/")


def sites_holding(path: str, profiles: Iterable[SiteProfile]) -> set[str]:
    """Sites with a storage root that contains the absolute `path`."""
    return {p.name for p in profiles if any(inside(path, r.path) for r in p.storage)}


class WorkdirOutside(ValidationFailed):
    """An absolute workdir outside every storage root of the sites that could run the task."""

    code = "workdir_outside"
    default_hint = _FIX


def resolve_workdir(workdir: str | None, base: str, profile: SiteProfile) -> str:
    """The folder the job runs in on `profile`'s site: `base` (the task's folder) by default."""
    if not workdir:
        return base
    if not workdir.startswith("/"):
        return f"{base}/{workdir.removeprefix('./')}"
    if not any(inside(workdir, r.path) for r in profile.storage):
        why = outside_message(workdir, {profile.name: profile})
        raise WorkdirOutside([FieldIssue("workdir", why)])
    return workdir


def outside_message(workdir: str, profiles: Mapping[str, SiteProfile]) -> str:
    roots = "; ".join(
        f"{name}: {', '.join(r.path for r in p.storage) or 'none'}"
        for name, p in sorted(profiles.items())
    )
    return f"{workdir} is inside no storage root of the usable sites ({roots})"
