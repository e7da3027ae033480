"""Logical data references: `site:root/relative/path` -> (site, root, collection id, path).

Pure: the profiles and the user's config are arguments; nothing here touches a file system. A
root given as a login-shell variable (`$SCRATCH`) stays as written here; `at_site` swaps in the
path the site's shell expanded, before anything is copied (the transfer service does)."""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable, Mapping

from fedhpc.domain.config import Site
from fedhpc.domain.site import StorageRoot
from fedhpc.ops.data import DataLocation
from fedhpc.transfer.errors import (
    BadDataRef,
    NoCollection,
    OutsideRoot,
    PathTraversal,
    UnknownRoot,
    UnknownSite,
    UnsupportedRoute,
)

__all__ = [
    "at_site",
    "choose_backend",
    "collection_of",
    "locate",
    "parse_ref",
    "resolve",
    "runs_as",
    "within",
]

_REF = re.compile(
    r"^(?P<site>[A-Za-z0-9][A-Za-z0-9_.+-]*):(?P<root>[A-Za-z0-9][A-Za-z0-9_.+-]*)"
    r"(?:/(?P<rel>.*))?$",
    re.DOTALL,
)


def parse_ref(ref: str) -> tuple[str, str, str]:
    """(site, root, normalised relative path); '' is the root itself."""
    m = _REF.match(ref)
    if m is None:
        raise BadDataRef(f"{ref!r} is not a data reference (site:root/relative/path)")
    rel = m["rel"] or ""
    if any(ord(c) < 32 or c == "\x7f" for c in rel):
        raise PathTraversal(f"{ref!r}: the path holds control characters")
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise PathTraversal(f"{ref!r}: `..` would leave the storage root {m['root']!r}")
    if any(p.startswith("-") for p in parts):
        raise PathTraversal(f"{ref!r}: a path segment may not start with '-'")
    return m["site"], m["root"], "/".join(parts)


def within(path: str, root: str) -> bool:
    """Is the (already normalised) `path` the root itself or below it? Lexical only."""
    root = root.rstrip("/") or "/"
    return path == root or path.startswith(root + "/") or root == "/"


def collection_of(site: Site, root: StorageRoot) -> str | None:
    """The user's collection id for the root wins over the profile's."""
    return site.user.collections.get(root.name) or root.collection_id


def _root(site: Site, name: str) -> StorageRoot:
    for r in site.profile.storage:
        if r.name == name:
            return r
    names = ", ".join(r.name for r in site.profile.storage) or "none"
    raise UnknownRoot(f"site {site.name} has no storage root {name!r} (it has: {names})")


def resolve(ref: str, sites: Mapping[str, Site], *, need_collection: bool = False) -> DataLocation:
    """Resolve `ref` against the enabled sites; typed errors for every way it can be wrong."""
    site_name, root_name, rel = parse_ref(ref)
    site = sites.get(site_name)
    if site is None:
        raise UnknownSite(f"{ref!r}: no enabled site {site_name!r}")
    root = _root(site, root_name)
    base = posixpath.normpath(root.path)
    path = posixpath.normpath(posixpath.join(base, rel)) if rel else base
    if not within(path, base):  # defence in depth: parse_ref already refused `..`
        raise PathTraversal(f"{ref!r} resolves outside {base}")
    collection = collection_of(site, root)
    if need_collection and not collection:
        raise NoCollection(
            f"{ref!r}: storage root {root_name!r} of {site_name} has no Globus collection id"
        )
    return DataLocation(
        site=site_name, root=root_name, root_path=base, collection_id=collection, path=path
    )


def locate(site: Site, path: str, roots: Mapping[str, str] | None = None) -> DataLocation:
    """The storage root holding an absolute `path` at `site` (a task's output, say); the
    longest matching root wins. `roots` maps a root's name to its path at the site (`$NAME`
    roots expanded); without it, or for a root it lacks, the profile's path as written."""
    norm = posixpath.normpath(path)
    if not posixpath.isabs(norm):
        raise PathTraversal(f"{path!r} is not absolute")
    best: tuple[StorageRoot, str] | None = None
    for r in site.profile.storage:
        base = posixpath.normpath((roots or {}).get(r.name, r.path))
        longer = best is None or len(base) > len(best[1])
        if not base.startswith("$") and within(norm, base) and longer:  # `$NAME`: unexpanded
            best = (r, base)
    if best is None:
        raise OutsideRoot(f"{path} is outside every storage root of {site.name}")
    return DataLocation(
        site=site.name,
        root=best[0].name,
        root_path=best[1],
        collection_id=collection_of(site, best[0]),
        path=norm,
    )


def at_site(loc: DataLocation, expand: Callable[[str], str]) -> DataLocation:
    """`loc` with its root as a path at the site: `expand` maps the profile's root path (a
    `$NAME` one through the site's shell; a plain path to itself) and may raise."""
    base = posixpath.normpath(expand(loc.root_path))
    if base == loc.root_path:
        return loc
    rel = loc.path[len(loc.root_path) :].lstrip("/")
    path = posixpath.normpath(posixpath.join(base, rel)) if rel else base
    return loc.model_copy(update={"root_path": base, "path": path})


def _local(site: Site) -> bool:
    # A local-test site reached through the devfed SSH front is on this machine too.
    return site.profile.local_test and site.transport.kind in ("local", "ssh")


def choose_backend(source: Site, destination: Site) -> str:
    """`local` between two sites of the local test federation (same machine), else `globus`."""
    if _local(source) and _local(destination):
        return "local"
    if not (source.profile.local_test or destination.profile.local_test):
        return "globus"
    raise UnsupportedRoute(
        f"no backend moves data between {source.name} and {destination.name}",
        hint="The local backend joins local-test sites only; Globus joins real collections.",
    )


def runs_as(owner: str | None, sites: Mapping[str, Site], *names: str | None) -> str | None:
    """The person a transfer's calls run as: its owner when one of its sites runs each person
    as themselves (`identity = "person"`: their Globus Transfer token, their own paths at
    the site); else None, the service's identity."""
    mine = [sites[n] for n in names if n is not None and n in sites]
    return owner if any(s.user.identity == "person" for s in mine) else None
