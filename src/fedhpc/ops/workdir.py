"""Where a task runs and writes: `workdir` and `outputs` confined to the task's folder or a
site's storage roots (pure).

Relative paths resolve under the task's own folder on the site; absolute ones must lie inside
one of the site's declared storage roots (a profile that lets jobs use home declares a `home`
root). `~` is never expanded: a batch directive would take it literally.

A root given as a login-shell variable (`$SCRATCH`, TACC) is only known at the site: these pure
checks treat it as possibly holding any absolute path, and dispatch decides against the roots
the site's shell expanded (`resolve_workdir(..., roots=...)`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from fedhpc.domain.site import SiteProfile
from fedhpc.errors import FieldIssue, ValidationFailed

__all__ = [
    "OutputOutside",
    "WorkdirOutside",
    "check_output",
    "check_workdir",
    "confined",
    "inside",
    "may_hold",
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
    empty = f"{path!r} is not a folder for a job: omit workdir for the task's own folder"
    return _checked(path, empty, "the task's folder or storage root")


def check_output(path: str) -> str:
    """An output is confined like `workdir`: relative to it (no '..'), or absolute inside a
    storage root (checked against the sites at the door and at dispatch). Raises ValueError."""
    empty = f"{path!r} is not a file the task writes: name one relative to workdir"
    return _checked(path, empty, "workdir or the storage root")


def _checked(path: str, empty: str, within: str) -> str:
    if path.startswith("~"):
        raise ValueError(
            "'~' is not expanded by batch schedulers: give a path relative to the task's folder, "
            "or an absolute path inside a storage root"
        )
    if "//" in path:
        raise ValueError("empty path component ('//'): a path like //server/share is not a folder")
    if path.strip("/.") == "":
        raise ValueError(empty)
    rel = path if path.startswith("/") else path.removeprefix("./")
    if ".." in rel.split("/"):
        raise ValueError(f"'..' would leave {within}")
    if "." in rel.rstrip("/").split("/"):
        raise ValueError("'.' components are ambiguous: write the path without them")
    return rel.rstrip("/")


def inside(path: str, root: str) -> bool:
    root = root.rstrip("/") or "/"
    return path == root or path.startswith(root + "/")


def confined(path: str, roots: Sequence[str]) -> bool:
    """Is an absolute `path` inside one of `roots` (paths at the site, `$NAME` ones expanded)?"""
    return any(inside(path, r) for r in roots if not r.startswith("$"))


def may_hold(path: str, root: str) -> bool:
    """Can the profile root `root` hold `path`? A `$NAME` root is unknown here (the site's shell
    expands it), so it may: the check at dispatch, against the expanded root, decides."""
    return root.startswith("$") or inside(path, root)


def sites_holding(path: str, profiles: Iterable[SiteProfile]) -> set[str]:
    """Sites with a storage root that contains (or, for a `$NAME` root, may contain) `path`."""
    return {p.name for p in profiles if any(may_hold(path, r.path) for r in p.storage)}


class WorkdirOutside(ValidationFailed):
    """An absolute workdir outside every storage root of the sites that could run the task."""

    code = "workdir_outside"
    default_hint = _FIX


class OutputOutside(ValidationFailed):
    """An absolute output outside every storage root of the sites that could run the task: a
    path fedhpc would stat and report (an existence oracle for /etc or /proc), not an output."""

    code = "output_outside"
    default_hint = (
        "Give outputs relative to workdir (e.g. 'result.csv'), or absolute paths inside a "
        "storage root of the site (the message lists them)."
    )


def resolve_workdir(
    workdir: str | None, base: str, profile: SiteProfile, roots: Sequence[str] | None = None
) -> str:
    """The folder the job runs in on `profile`'s site: `base` (the task's folder) by default.
    `roots` are the site's storage roots as paths there (`$NAME` ones expanded by its shell);
    without them the profile's paths are used as written."""
    if not workdir:
        return base
    if not workdir.startswith("/"):
        return f"{base}/{workdir.removeprefix('./')}"
    paths = [r.path for r in profile.storage] if roots is None else list(roots)
    if not any(inside(workdir, r) for r in paths):
        listed = ", ".join(paths) or "none"
        why = f"{workdir} is inside no storage root of {profile.name} ({listed})"
        raise WorkdirOutside([FieldIssue("workdir", why)])
    return workdir


def outside_message(workdir: str, profiles: Mapping[str, SiteProfile]) -> str:
    roots = "; ".join(
        f"{name}: {', '.join(r.path for r in p.storage) or 'none'}"
        for name, p in sorted(profiles.items())
    )
    return f"{workdir} is inside no storage root of the usable sites ({roots})"
