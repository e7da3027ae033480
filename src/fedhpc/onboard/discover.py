"""`fedhpc sites discover`, the I/O edge: ask a live scheduler over a transport, build the profile
and config entry (pure, `build`), write them to the user's folders (never the shipped ones)."""

from __future__ import annotations

import os
import tomllib
from collections.abc import Callable, Mapping
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

from fedhpc.adapters.command import BatchSection, Command, CommandResult, batch, split_batch
from fedhpc.adapters.dialects.facts import ClusterFacts
from fedhpc.adapters.transports import make_transport
from fedhpc.adapters.transports.base import Transport, TransportError
from fedhpc.adapters.transports.local import TransportTimeout
from fedhpc.domain.config import TransportOverride
from fedhpc.domain.site import SAFE_NAME, SiteProfile, TransportSpec
from fedhpc.errors import UsageError
from fedhpc.onboard.build import Discovery, build_discovery
from fedhpc.onboard.render import Difference, config_entry_toml, profile_diff, profile_toml
from fedhpc.profiles.loader import (
    load_profile,
    shipped_profile_dirs,
    user_config_path,
    user_profiles_dir,
)
from fedhpc.settings import fedhpc_home

__all__ = [
    "DIALECTS",
    "DiscoverDialect",
    "DiscoverFailed",
    "WriteOutcome",
    "discover",
    "discover_dialect",
    "write_discovery",
]


class DiscoverFailed(UsageError):
    """The scheduler could not be asked, or did not describe itself."""

    code = "discover_failed"


@dataclass(frozen=True, slots=True)
class DiscoverDialect:
    """One dialect's discovery module: a ping, the batch of commands, and the parser."""

    ping: Command
    ping_problem: Callable[[CommandResult], str | None]
    sections: dict[str, Command]
    parse: Callable[[Mapping[str, BatchSection]], ClusterFacts]


def discover_dialect(name: str) -> DiscoverDialect:
    if name == "slurm":
        # startup: only the discovery module of the scheduler asked for
        from fedhpc.adapters.dialects import slurm_discover as m
    elif name == "pbs":
        from fedhpc.adapters.dialects import pbs_discover as m  # type: ignore[no-redef]
    elif name == "lsf":
        from fedhpc.adapters.dialects import lsf_discover as m  # type: ignore[no-redef]
    else:
        raise UsageError(f"no discovery for dialect {name!r}", hint="Use slurm, pbs or lsf.")
    return DiscoverDialect(
        m.ping_command(), m.ping_problem, m.discover_sections(), m.parse_discovery
    )


DIALECTS = ("slurm", "pbs", "lsf")
# The command that tells which schedulers' clients a login node has, in the order tried.
_SNIFF = (
    'found=1; for c in sbatch qsub bsub; do command -v "$c" >/dev/null 2>&1 && '
    '{ echo "$c"; found=0; }; done; exit "$found"'
)
_SNIFFED = {"sbatch": "slurm", "qsub": "pbs", "bsub": "lsf"}


async def _which_dialect(transport: Transport) -> str:
    """The scheduler whose client is on PATH; with several (a host with Slurm and PBS
    clients, as this machine's devfed), the first whose server answers its ping."""
    result = await transport.run(Command(("bash", "-c", _SNIFF), timeout_s=30.0))
    found = [_SNIFFED[w] for w in result.stdout.split() if w in _SNIFFED]
    if not found:
        raise DiscoverFailed(
            "no scheduler command (sbatch, qsub, bsub) is on the site's PATH",
            hint="Check the login environment (modules, PATH), or pass --dialect.",
        )
    if len(found) > 1:
        for name in found:
            d = discover_dialect(name)
            with suppress(TransportTimeout):
                if d.ping_problem(await transport.run(d.ping)) is None:
                    return name
    return found[0]


def _check_local(name: str, spec: TransportSpec) -> None:
    """A local SLURM_CONF that is not there fails at once (Slurm would retry for a minute)."""
    conf = spec.env.get("SLURM_CONF")
    if spec.kind == "local" and conf and not Path(conf).is_file():
        raise DiscoverFailed(
            f"{name}: SLURM_CONF={conf} is not a file here",
            hint="Name the cluster's slurm.conf: --env SLURM_CONF=/path/to/slurm.conf",
        )


async def discover(
    name: str,
    spec: TransportSpec,
    *,
    dialect: str | None = None,
    title: str = "",
    login: str | None = None,
    timeout_s: float = 120.0,
) -> Discovery:
    """Ask the scheduler behind `spec` (one batched remote call) and build its profile."""
    if not SAFE_NAME.match(name):
        raise UsageError(f"{name!r} is not a site name", hint="Use letters, digits, '_', '.', '-'.")
    _check_local(name, spec)
    transport = make_transport(spec, state_dir=fedhpc_home())
    try:
        return await _discover(
            name, spec, transport, dialect=dialect, title=title, login=login, timeout_s=timeout_s
        )
    except TransportTimeout as exc:
        # The site answered too slowly (e.g. the login shell): reached, so no "check ssh" hint.
        raise DiscoverFailed(
            f"{name}: {exc.message}",
            hint="Run this again (a busy login node may answer sooner); check the site's "
            "status page if it keeps timing out.",
        ) from None
    except TransportError as exc:
        # Onboarding asks once, now: "fedhpc retries this itself" (the daemon's hint) is not so.
        raise DiscoverFailed(f"{name}: {exc.message}", hint=_reach_hint(name, spec)) from None
    finally:
        await transport.aclose()


def _reach_hint(name: str, spec: TransportSpec) -> str:
    if spec.kind == "ssh":
        return (
            f"Check that `ssh {spec.host}` works in this terminal (host name, user, host key); "
            f"`fedhpc connect {name} --ssh {spec.host}` opens the session with its prompts."
        )
    return "Check how the site is reached (docs/transports.md), then run this again."


async def _discover(
    name: str,
    spec: TransportSpec,
    transport: Transport,
    *,
    dialect: str | None,
    title: str,
    login: str | None,
    timeout_s: float,
) -> Discovery:
    """The questions and the build, on an open transport (the caller closes it)."""
    dialect = dialect or await _which_dialect(transport)
    d = discover_dialect(dialect)
    try:
        problem = d.ping_problem(await transport.run(d.ping))
    except TransportTimeout:
        problem = f"the scheduler did not answer within {d.ping.timeout_s:g} s"
    if problem:
        raise DiscoverFailed(
            f"{name}: {problem}",
            hint="Check the scheduler's environment (e.g. SLURM_CONF) and that it is up; "
            "`fedhpc doctor` checks the same once a site is configured.",
        )
    try:
        result = await transport.run(batch(d.sections, timeout_s=timeout_s))
    except TransportTimeout:
        # Reached and answering its ping, only slow: not a reachability problem.
        raise DiscoverFailed(
            f"{name}: the scheduler did not answer its questions within {timeout_s:g} s",
            hint=f"Run this again (a busy scheduler may answer sooner), or, if the center is "
            f"slow, give it longer: --timeout {max(2 * timeout_s, 240):g}",
        ) from None
    parts = split_batch(result.stdout)
    try:
        facts = d.parse(parts)
        return build_discovery(facts, name=name, transport=spec, title=title, login=login)
    except ValueError as exc:
        raise DiscoverFailed(
            f"{name}: {exc}",
            hint="Run the scheduler's commands by hand on the login node to see why.",
        ) from None


@dataclass(frozen=True, slots=True)
class WriteOutcome:
    """What `write_discovery` did, for the person."""

    profile_path: Path
    profile_loaded: bool  # False: kept next to the shipped one, which still wins
    config_path: Path
    config_written: bool
    config_entry: str
    shipped: SiteProfile | None
    diff: tuple[Difference, ...]
    notes: tuple[str, ...] = ()


def _shipped(name: str) -> SiteProfile | None:
    """The profile an installed package ships under this name (the last folder's wins, as in
    load_profiles)."""
    paths = [d / f"{name}.toml" for d in shipped_profile_dirs()]
    found = [p for p in paths if p.exists()]
    return load_profile(found[-1]) if found else None


def _has_site(config_path: Path, name: str) -> bool:
    if not config_path.exists():
        return False
    try:
        with config_path.open("rb") as fh:
            data = tomllib.load(fh)
    except tomllib.TOMLDecodeError:
        return True  # a file we cannot read is never appended to
    return name in (data.get("sites") or {})


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def write_discovery(
    found: Discovery,
    *,
    override: bool = False,
    config_path: Path | None = None,
    profiles_dir: Path | None = None,
) -> WriteOutcome:
    """Write the profile to the user's profile folder and append the site's entry to the
    config when it has none. A profile fedhpc ships is never shadowed unless `override`: the
    discovered one goes to `<profiles>/discovered/` for reference and the diff is returned."""
    name = found.profile.name
    shipped = _shipped(name)
    folder = profiles_dir or user_profiles_dir()
    loaded = shipped is None or override
    path = (folder if loaded else folder / "discovered") / f"{name}.toml"
    text = profile_toml(found.profile, found.confirm)
    _write(path, text)
    load_profile(path)  # what was written reads back, or this raises with file and key
    config = config_path or user_config_path()
    user = found.user
    reached = found.profile.transport
    if shipped is not None and reached.kind != "local" and reached != shipped.transport:
        # How this person reaches a shipped center (their login, alias, endpoint) is theirs.
        mine = TransportOverride(
            host=reached.host if reached.host != shipped.transport.host else None,
            user=reached.user,
            endpoint_id=reached.endpoint_id,
            options=dict(reached.options),
        )
        user = user.model_copy(update={"transport": mine})
    entry = config_entry_toml(name, user, found.qos_names)
    written = not _has_site(config, name)
    if written:
        config.parent.mkdir(parents=True, exist_ok=True)
        before = config.read_text(encoding="utf-8") if config.exists() else ""
        sep = (
            ""
            if not before or before.endswith("\n\n")
            else ("\n" if before.endswith("\n") else "\n\n")
        )
        _write(config, before + sep + entry)
    diff = tuple(profile_diff(shipped, found.profile)) if shipped else ()
    notes: tuple[str, ...] = ()
    if shipped is not None and not override and reached.kind != shipped.transport.kind:
        notes = (
            f"the shipped profile reaches {name} by {shipped.transport.kind}, not {reached.kind}; "
            "a config entry cannot change that: use --override to use the discovered profile",
        )
    return WriteOutcome(path, loaded, config, written, entry, shipped, diff, notes)
