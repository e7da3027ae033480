"""Where a task's files go at a site: the work base (the user's `workdir`, else a scratch root),
the task's folder, outputs confined to the storage roots, and the folder of the job arrays' own
scheduler output."""

from __future__ import annotations

from collections.abc import Sequence

from fedhpc.adapters.site import SiteAdapter, StorageUnread, WorkdirFailed
from fedhpc.ops.workdir import WorkdirOutside, confined, resolve_workdir

__all__ = [
    "arrays_dir",
    "check_outputs",
    "outside_roots",
    "site_roots",
    "task_workdir",
    "workbase",
]


def workbase(adapter: SiteAdapter) -> str:
    """Where the site's task folders go: the user's `workdir`, else `<scratch>/<login>/fedhpc`
    (a `$NAME` root such as TACC's `$SCRATCH` is the user's own: `<it>/fedhpc`). Raises
    `WorkdirFailed` when a `$NAME` root cannot be expanded."""
    site = adapter.site
    if site.user.workdir:
        return site.user.workdir.rstrip("/")
    roots = {r.name: r.path for r in site.profile.storage}
    root = roots.get("scratch") or roots.get("work") or next(iter(roots.values()), "/tmp")  # noqa: S108
    path = adapter.root_path(root)
    own = site.profile.local_test or path != root
    return f"{path}/fedhpc" if own else f"{path}/{adapter.login}/fedhpc"


def arrays_dir(adapter: SiteAdapter) -> str:
    """Where the site's job arrays write the scheduler's own output per element (each
    element's own goes to its task's files): cleaned once an element has ended
    (`array_leftovers`)."""
    return f"{workbase(adapter)}/arrays"


def task_workdir(adapter: SiteAdapter, workdir: str | None, base: str) -> str:
    """The task's folder at the site; an absolute `workdir` must lie in a root as the site's
    shell expanded it (placement could not tell for a `$NAME` root: now it can)."""
    roots = site_roots(adapter) if (workdir or "").startswith("/") else None
    try:
        return resolve_workdir(workdir, base, adapter.site.profile, roots)
    except WorkdirOutside as exc:
        raise WorkdirFailed(
            f"{WorkdirFailed.PREFIX} on {adapter.name}: {exc.message}",
            hint="Give a workdir inside one of these roots, or relative to the task's folder.",
        ) from None


def check_outputs(adapter: SiteAdapter, outputs: Sequence[str]) -> None:
    """Absolute outputs must lie in a root as the site's shell expanded it, like `workdir`: their
    sizes are reported back, which would tell whether any file there exists."""
    absolute = [(i, o) for i, o in enumerate(outputs) if o.startswith("/")]
    if not absolute:
        return
    roots = site_roots(adapter)
    for i, path in absolute:
        if not confined(path, roots):
            listed = ", ".join(roots) or "none"
            raise WorkdirFailed(
                f"{WorkdirFailed.PREFIX} on {adapter.name}: outputs[{i}] {path} is inside no "
                f"storage root of {adapter.name} ({listed})",
                hint="Give outputs relative to workdir, or inside one of these roots.",
            )


def outside_roots(adapter: SiteAdapter, paths: Sequence[str]) -> set[str]:
    """The absolute `paths` inside none of the site's storage roots as its shell expands them
    (every absolute one while they cannot be read): never to be looked at on the site."""
    absolute = {p for p in paths if p.startswith("/")}
    if not absolute:
        return set()
    try:
        roots = site_roots(adapter)
    except StorageUnread:
        return absolute
    return {p for p in absolute if not confined(p, roots)}


def site_roots(adapter: SiteAdapter) -> list[str]:
    """The site's storage roots as paths there; a `$NAME` root unset in its shell is named as
    such (it holds nothing: no path is guessed for it). Raises `StorageUnread` while unread."""
    out = []
    for r in adapter.site.profile.storage:
        try:
            out.append(adapter.root_path(r.path))
        except WorkdirFailed:
            out.append(f"{r.path} (not expanded)")
    return out
