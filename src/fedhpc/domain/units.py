"""Parse and print memory sizes and durations the way schedulers write them; the numeric and
time boundary rules every entry point shares (finite, in range, timezone-aware)."""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime
from typing import Annotated

from pydantic import AfterValidator, BeforeValidator

__all__ = [
    "MAX_COUNT",
    "MAX_CREDITS",
    "MAX_GROUP_CHILDREN",
    "MAX_MEMORY_MIB",
    "MAX_SECONDS",
    "MiB",
    "Seconds",
    "UtcDatetime",
    "as_utc",
    "finite_or_none",
    "format_hms",
    "format_minutes",
    "parse_duration",
    "parse_memory_mib",
]

# The documented ranges (docs/errors.md). Far beyond any real machine, small enough that every
# product, sum and conversion placement does stays an exact, finite number.
MAX_MEMORY_MIB = 1024**3  # 1 PiB per node
MAX_SECONDS = 10 * 366 * 86400  # ten years of wall time
MAX_COUNT = 1_000_000  # nodes, CPUs or GPUs in one request; jobs in one queue
MAX_CREDITS = 1e15  # budgets, balances, usage, charges
# Children in one submit_group request. A group is accepted in one transaction and answered
# at once (its answer does not grow with it), and placed in the daemon in batches.
MAX_GROUP_CHILDREN = 10_000

_MEM = re.compile(r"^\s*(\d{1,30}(?:\.\d{1,30})?)\s*([KMGTP]?)(?:i?B)?\s*$", re.IGNORECASE)
_FACTOR_MIB = {"K": 1 / 1024, "": 1, "M": 1, "G": 1024, "T": 1024**2, "P": 1024**3}


def _bounded(number: float, limit: int, what: str, unit: str) -> int:
    """A finite, non-negative number up to `limit`, rounded; else a ValueError that says why."""
    if isinstance(number, float) and not math.isfinite(number):
        raise ValueError(f"{what} must be a finite number")
    if number < 0:
        raise ValueError(f"{what} cannot be negative")
    if number > limit:
        raise ValueError(f"{what} over the limit of {limit} {unit}")
    if number > 0 and round(number) == 0:  # 0.5 MiB is a slip, never a request for nothing
        raise ValueError(f"{what} of {number:g} {unit} rounds to 0; give a whole number of {unit}")
    return round(number)


def _clock_parts(minutes: int, seconds: int, text: str) -> None:
    """Minutes and seconds of a clock time are below 60 ('99:99:99' is a slip, not 4 days)."""
    if minutes >= 60 or seconds >= 60:
        raise ValueError(
            f"cannot read {text!r} as a duration: minutes and seconds go up to 59 "
            "(write '2h', '90m' or 'HH:MM:SS')"
        )


def parse_memory_mib(value: object) -> int:
    """Memory as whole MiB from an int (already MiB) or a string such as '4G', '512M', '1.5T';
    finite and at most `MAX_MEMORY_MIB`."""
    if isinstance(value, bool):
        raise ValueError("memory must be a size such as '4G' or a number of MiB")
    if isinstance(value, int | float):
        return _bounded(value, MAX_MEMORY_MIB, "memory", "MiB")
    if isinstance(value, str) and len(value) <= 80:
        m = _MEM.match(value)
        if m:
            mib = float(m.group(1)) * _FACTOR_MIB[m.group(2).upper()]
            return _bounded(mib, MAX_MEMORY_MIB, "memory", "MiB")
    shown = repr(value) if not isinstance(value, str) or len(value) <= 80 else "a long string"
    raise ValueError(f"cannot read {shown} as memory; use a number of MiB or '64G', '512M'")


# Slurm's time format (sbatch(1) --time): "minutes", "minutes:seconds", "hours:minutes:seconds",
# "days-hours", "days-hours:minutes", "days-hours:minutes:seconds".
_DAYS = re.compile(r"^(\d{1,12})-(\d{1,12})(?::(\d{1,12}))?(?::(\d{1,12}))?$")
_SUFFIX = re.compile(r"^(\d{1,30}(?:\.\d{1,30})?)\s*([smhd])$")
_CLOCK = re.compile(r"^\d{1,12}(?::\d{1,12}){0,2}$")


def parse_duration(value: object) -> int:
    """Seconds from an int (already seconds), '90m', '2h', '1d', 'HH:MM:SS' or 'D-HH:MM:SS';
    finite and at most `MAX_SECONDS`."""
    if isinstance(value, bool):
        raise ValueError("a duration must be seconds or a string such as '2h' or '01:30:00'")
    if isinstance(value, int | float):
        return _bounded(value, MAX_SECONDS, "a duration", "s")
    if isinstance(value, str) and len(value) <= 80:
        text = value.strip().lower()
        if m := _SUFFIX.match(text):
            scale = {"s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]
            return _bounded(float(m.group(1)) * scale, MAX_SECONDS, "a duration", "s")
        if m := _DAYS.match(text):
            d, h, mi, s = (int(g) if g else 0 for g in m.groups())
            if h >= 24:
                raise ValueError(f"cannot read {value!r} as a duration: hours after 'D-' go to 23")
            _clock_parts(mi, s, value)
            return _bounded(((d * 24 + h) * 60 + mi) * 60 + s, MAX_SECONDS, "a duration", "s")
        if _CLOCK.match(text):
            nums = [int(p) for p in text.split(":")]
            if len(nums) == 1:
                total = nums[0] * 60  # a bare number in Slurm's format means minutes
            elif len(nums) == 2:
                _clock_parts(0, nums[1], value)
                total = nums[0] * 60 + nums[1]
            else:
                _clock_parts(nums[1], nums[2], value)
                total = nums[0] * 3600 + nums[1] * 60 + nums[2]
            return _bounded(total, MAX_SECONDS, "a duration", "s")
    shown = repr(value) if not isinstance(value, str) or len(value) <= 80 else "a long string"
    raise ValueError(f"cannot read {shown} as a duration; use seconds, '2h', or 'HH:MM:SS'")


def format_hms(seconds: int) -> str:
    """'HH:MM:SS' (hours may exceed 24), accepted by Slurm, PBS and our own parser."""
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h:02d}:{m:02d}:{s:02d}"


def format_minutes(seconds: int) -> int:
    """Whole minutes, rounded up, for schedulers that take minutes (LSF -W)."""
    return max(1, -(-seconds // 60))


def as_utc(value: datetime) -> datetime:
    """The same instant in UTC. A naive time is taken as UTC: fedhpc writes only UTC, and a
    naive value at a boundary (an old snapshot, a hand-written file) is one of its own."""
    if value.tzinfo is None or value.tzinfo.utcoffset(value) is None:
        return value.replace(tzinfo=UTC)
    try:
        return value.astimezone(UTC)
    except OverflowError:  # 0001-01-01 east of UTC, 9999-12-31 west: a validation error
        raise ValueError(f"{value.isoformat()} is out of range in UTC (years 1 to 9999)") from None


def finite_or_none(value: float | None, limit: float = MAX_CREDITS) -> float | None:
    """`value` when it is a finite number within ±limit, else None (unusable)."""
    if value is None or not math.isfinite(value) or abs(value) > limit:
        return None
    return value


MiB = Annotated[int, BeforeValidator(parse_memory_mib)]
Seconds = Annotated[int, BeforeValidator(parse_duration)]
UtcDatetime = Annotated[datetime, AfterValidator(as_utc)]
