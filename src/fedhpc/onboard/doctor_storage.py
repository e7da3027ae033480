"""The doctor's storage check: each storage root of the profile (and the user's `workdir`)
exists at the site, probed by one shell command through the site's transport.

A storage root is the shared top a center gives (`/u`, `/anvil/scratch`, or a variable such
as `$SCRATCH` that TACC sets per user); jobs write in the user's own folder under it (the daemon's
work base is ROOT/LOGIN/fedhpc), so a root the user cannot write is normal and only noted. A
`$NAME` or `$NAME/rest` root is expanded by the remote shell (`${!NAME}` for a NAME that is a
valid variable name; never eval). The user's `workdir` is where fedhpc writes, so it must be
writable."""

from __future__ import annotations

from typing import Any

from fedhpc.adapters.command import Command, CommandResult
from fedhpc.errors import FedError

__all__ = ["STORAGE_SCRIPT", "StorageCheck", "parse_storage", "probe_storage"]

StorageCheck = tuple[str, bool | None, str, str]  # name, ok (None: note), detail, fix

# One line per argument: STATE PATH, PATH expanded. States: ok (writable), user (the root is
# not writable but the user's folder ROOT/$USER is), readonly, missing, unset (the variable is
# unset or empty), badname (a '$' root whose name is not a variable name).
STORAGE_SCRIPT = r"""u=${USER:-$(id -un 2>/dev/null)}
for p in "$@"; do
  case "$p" in
    '$'*)
      n=${p#?}; r=
      case "$n" in */*) r=/${n#*/}; n=${n%%/*};; esac
      if ! [[ $n =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]]; then echo "badname $p"; continue; fi
      v=${!n}
      if [ -z "$v" ]; then echo "unset $p"; continue; fi
      p=$v$r;;
  esac
  if [ -d "$p" ] && [ -w "$p" ]; then echo "ok $p"
  elif [ -d "$p" ]; then
    if [ -n "$u" ] && [ -d "$p/$u" ] && [ -w "$p/$u" ]; then echo "user $p/$u"
    else echo "readonly $p"; fi
  else echo "missing $p"; fi
done
"""
_STATES = {"ok", "user", "readonly", "missing", "unset", "badname"}


async def probe_storage(
    transport: Any, site: str, roots: list[tuple[str, str]]
) -> list[StorageCheck]:
    """Run the probe for `roots` (name, path; the name `workdir` is the user's workdir)."""
    try:
        res = await transport.run(
            Command(("bash", "-c", STORAGE_SCRIPT, "fedhpc", *(p for _, p in roots)))
        )
    except FedError as exc:
        return [_failed(site, exc.message, exc.hint or "")]
    return parse_storage(site, roots, res)


def parse_storage(
    site: str, roots: list[tuple[str, str]], res: CommandResult
) -> list[StorageCheck]:
    """The checks from the probe's output (pure); one failed check when the probe failed."""
    lines = res.stdout.splitlines()
    parsed = [line.split(" ", 1) for line in lines]
    if (
        not res.ok
        or len(parsed) != len(roots)
        or any(len(p) != 2 or p[0] not in _STATES for p in parsed)
    ):
        why = (res.stderr.strip() or res.stdout.strip())[-300:] or f"exit {res.returncode}"
        if res.ok:
            why = f"unexpected output ({len(lines)} lines for {len(roots)} roots): {why}"
        return [_failed(site, why, "")]
    return [
        _one(site, name, path, state, where)
        for (name, path), (state, where) in zip(roots, parsed, strict=True)
    ]


def _failed(site: str, why: str, hint: str) -> StorageCheck:
    return (
        "storage",
        False,
        f"storage check failed: {why}",
        hint or f"run `bash -c true` at {site} through its transport; fix what it reports",
    )


def _one(site: str, name: str, path: str, state: str, where: str) -> StorageCheck:
    fix = (
        f"create {path} at the site, or fix the [[storage]] path of {site} "
        "(a profile in your profile folder overrides the shipped one)"
    )
    shown = path if where == path else f"{path} = {where}"
    if name == "workdir":
        fix = f"create {path} at the site and make it writable, or fix workdir under [sites.{site}]"
    if state == "ok":
        return (f"storage:{name}", True, f"{shown}: writable", "")
    if state == "user":
        return (f"storage:{name}", True, f"{shown}: your folder is writable", "")
    if state == "readonly":
        if name == "workdir":
            return (f"storage:{name}", False, f"{shown}: not writable by you", fix)
        return (
            f"storage:{name}",
            None,
            f"{shown}: exists, not writable by you (a shared root: jobs write in your own "
            "folder under it)",
            "",
        )
    if state == "unset":
        return (
            f"storage:{name}",
            False,
            f"{path}: the variable is not set in the shell fedhpc's commands get at the site",
            f"set it at the site, or fix the [[storage]] path of {site}",
        )
    if state == "badname":
        return (f"storage:{name}", False, f"{path}: not a $NAME variable", fix)
    return (f"storage:{name}", False, f"{shown}: missing", fix)
