"""The doctor's Slurm-side checks of one site: the user's associations (and QoS) cover each
configured account's partitions (sacctmgr), and the scheduler accepts a small job on each
partition (`sbatch --test-only`, submitting nothing). Each check is recorded on the doctor's
run (`Recorder`) in order, through the site's own transport."""

from __future__ import annotations

from typing import Any, Protocol

from fedhpc.adapters.command import Command
from fedhpc.adapters.dialects import get_dialect
from fedhpc.adapters.dialects.base import SchedulerRejected
from fedhpc.adapters.dialects.facts import AssociationFacts
from fedhpc.adapters.dialects.slurm import SlurmDialect
from fedhpc.adapters.dialects.slurm_discover import (
    ASSOC_FIELDS,
    parse_associations,
    parse_qos,
)
from fedhpc.domain.config import Site
from fedhpc.domain.job import JobSpec, Shape
from fedhpc.errors import FedError

__all__ = ["Recorder", "check_associations", "check_test_submits"]


class Recorder(Protocol):
    """Where a check lands: the doctor's list for one site."""

    site: Site

    def add(self, name: str, ok: bool | None, detail: str, fix: str = "") -> None: ...


def _covers(assoc: list[AssociationFacts], account: str, partition: str | None) -> bool:
    return any(a.account == account and (a.partition in (None, partition)) for a in assoc)


async def check_associations(run: Recorder, adapter: Any) -> None:
    script = f'sacctmgr -nP show assoc where user="$(id -un)" format={ASSOC_FIELDS}'
    res = await adapter.transport.run(Command(("bash", "-c", script)))
    qres = await adapter.transport.run(
        Command(("sacctmgr", "-nP", "show", "qos", "format=Name,MaxWall,MaxJobsPU,MaxSubmitPU"))
    )
    if not res.ok:
        missing = res.returncode == 127
        run.add(
            "associations",
            False,
            "sacctmgr is not on the site's PATH"
            if missing
            else f"sacctmgr failed (exit {res.returncode}): {res.stderr.strip()[-200:]}",
            "load the Slurm module in the login environment, or fix [transport] env PATH"
            if missing
            else "the accounting database refused or did not answer; the center may hide "
            "associations: ask support which accounts you have",
        )
        return
    assoc = list(parse_associations(res.stdout, None))
    known_qos = set(parse_qos(qres.stdout)) if qres.ok else set()
    accounts = run.site.user.accounts
    if not accounts:
        run.add("associations", None, "no account configured; jobs use your default account")
        return
    profile = run.site.profile
    for acct in accounts:
        parts = acct.partitions or tuple(
            p.name for p in profile.partitions if p.name not in profile.blocked_partitions
        )
        lacking = [p for p in parts if not _covers(assoc, acct.name, _sched_name(run.site, p))]
        mine = sorted({a.account for a in assoc})
        run.add(
            f"association:{acct.name}",
            not lacking,
            f"no association on {', '.join(lacking)} (yours: {', '.join(mine) or 'none'})"
            if lacking
            else f"covers {', '.join(parts)}",
            f"ask the center to add {acct.name} on those partitions, or fix "
            f"[[sites.{run.site.name}.accounts]] (name, partitions) in your config",
        )
        if acct.qos:
            allowed = {q for a in assoc if a.account == acct.name for q in a.qos}
            ok = acct.qos in allowed or (not allowed and acct.qos in known_qos)
            why = (
                "is not a QoS this scheduler knows"
                if acct.qos not in known_qos
                else f"is not allowed for {acct.name} (allowed: {', '.join(sorted(allowed))})"
            )
            run.add(
                f"qos:{acct.name}",
                ok,
                f"qos {acct.qos} " + ("allowed" if ok else why),
                f"set qos under [[sites.{run.site.name}.accounts]] to one of: "
                f"{', '.join(sorted(allowed or known_qos)) or '(none known)'}",
            )


def _sched_name(site: Site, partition: str) -> str:
    try:
        spec = site.profile.partition(partition)
    except KeyError:
        return partition
    return spec.scheduler_partition or spec.name


async def check_test_submits(run: Recorder, adapter: Any, dialect: str) -> None:
    profile = run.site.profile
    d = get_dialect(dialect)
    if not isinstance(d, SlurmDialect):
        run.add("test_submit", None, f"{dialect} has no dry-run submit (sbatch --test-only)")
        return
    for part in profile.partitions:
        if part.name in profile.blocked_partitions:
            continue
        acct = next(
            (a for a in run.site.user.accounts if not a.partitions or part.name in a.partitions),
            None,
        )
        acc = part.node.accelerator
        shape = Shape(
            cpus=1, gpus=1 if acc else 0, wall_time_s=60, accelerator_type=acc.type if acc else None
        )
        spec = JobSpec(
            name="fedhpc-doctor",
            command=("true",),
            partition=part.name,
            shape=shape,
            account=acct.name if acct else None,
            qos=acct.qos if acct else None,
        )
        asked = f"a 1-CPU 1-GPU ({acc.type}) job" if acc else "a 1-CPU job"
        name = f"test_submit:{part.name}"
        try:
            result = await adapter.transport.run(d.test_only_command(adapter.render(spec)))
            d.parse_test_only(result)
            run.add(name, True, f"sbatch --test-only accepted {asked}")
        except SchedulerRejected as exc:
            run.add(
                name,
                False,
                f"sbatch --test-only refused {asked}: {exc.message}",
                "the scheduler refuses this partition with your account/QoS: fix the "
                f"account under [sites.{run.site.name}] or block the partition",
            )
        except FedError as exc:
            run.add(name, False, f"sbatch --test-only ({asked}): {exc.message}", exc.hint or "")
