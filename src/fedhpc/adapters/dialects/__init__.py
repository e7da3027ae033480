"""Scheduler dialects: slurm, pbs (PBS Pro), lsf and process (a local-process scheduler). Pure
modules, looked up by name."""

from __future__ import annotations

from fedhpc.adapters.dialects.base import Dialect, SchedulerRejected

__all__ = ["Dialect", "SchedulerRejected", "get_dialect"]


def get_dialect(name: str) -> Dialect:
    """The dialect for a profile's `dialect` field."""
    if name == "slurm":
        # startup: only the dialects the configured sites use
        from fedhpc.adapters.dialects.slurm import SlurmDialect

        return SlurmDialect()
    if name == "pbs":
        # startup: only the dialects the configured sites use
        from fedhpc.adapters.dialects.pbs import PbsDialect

        return PbsDialect()
    if name == "lsf":
        # startup: only the dialects the configured sites use
        from fedhpc.adapters.dialects.lsf import LsfDialect

        return LsfDialect()
    if name == "process":
        # startup: only the dialects the configured sites use
        from fedhpc.adapters.dialects.process import ProcessDialect

        return ProcessDialect()
    raise KeyError(f"unknown scheduler dialect {name!r}")
