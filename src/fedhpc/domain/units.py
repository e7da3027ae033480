"""Parse and print memory sizes and durations the way schedulers write them."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import BeforeValidator

__all__ = [
    "MiB",
    "Seconds",
    "format_hms",
    "format_minutes",
    "parse_duration",
    "parse_memory_mib",
]

_MEM = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGTP]?)(?:i?B)?\s*$", re.IGNORECASE)
_FACTOR_MIB = {"K": 1 / 1024, "": 1, "M": 1, "G": 1024, "T": 1024**2, "P": 1024**3}


def parse_memory_mib(value: object) -> int:
    """Memory as whole MiB from an int (already MiB) or a string such as '4G', '512M', '1.5T'."""
    if isinstance(value, bool):
        raise ValueError("memory must be a size such as '4G' or a number of MiB")
    if isinstance(value, int):
        if value < 0:
            raise ValueError("memory cannot be negative")
        return value
    if isinstance(value, float) and value >= 0:
        return round(value)
    if isinstance(value, str):
        m = _MEM.match(value)
        if m:
            return round(float(m.group(1)) * _FACTOR_MIB[m.group(2).upper()])
    raise ValueError(f"cannot read {value!r} as memory; use a number of MiB or '64G', '512M'")


# Slurm's time format (sbatch(1) --time): "minutes", "minutes:seconds", "hours:minutes:seconds",
# "days-hours", "days-hours:minutes", "days-hours:minutes:seconds".
_DAYS = re.compile(r"^(\d+)-(\d+)(?::(\d+))?(?::(\d+))?$")
_SUFFIX = re.compile(r"^(\d+(?:\.\d+)?)\s*([smhd])$")


def parse_duration(value: object) -> int:
    """Seconds from an int (already seconds), '90m', '2h', '1d', 'HH:MM:SS' or 'D-HH:MM:SS'."""
    if isinstance(value, bool):
        raise ValueError("a duration must be seconds or a string such as '2h' or '01:30:00'")
    if isinstance(value, int):
        if value < 0:
            raise ValueError("a duration cannot be negative")
        return value
    if isinstance(value, float) and value >= 0:
        return round(value)
    if isinstance(value, str):
        text = value.strip().lower()
        if m := _SUFFIX.match(text):
            scale = {"s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]
            return round(float(m.group(1)) * scale)
        if m := _DAYS.match(text):
            d, h, mi, s = (int(g) if g else 0 for g in m.groups())
            return ((d * 24 + h) * 60 + mi) * 60 + s
        parts = text.split(":")
        if 1 <= len(parts) <= 3 and all(p.isdigit() for p in parts):
            nums = [int(p) for p in parts]
            if len(nums) == 1:
                return nums[0] * 60  # a bare number in Slurm's format means minutes
            if len(nums) == 2:
                return nums[0] * 60 + nums[1]
            return nums[0] * 3600 + nums[1] * 60 + nums[2]
    raise ValueError(f"cannot read {value!r} as a duration; use seconds, '2h', or 'HH:MM:SS'")


def format_hms(seconds: int) -> str:
    """'HH:MM:SS' (hours may exceed 24), accepted by Slurm, PBS and our own parser."""
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h:02d}:{m:02d}:{s:02d}"


def format_minutes(seconds: int) -> int:
    """Whole minutes, rounded up, for schedulers that take minutes (LSF -W)."""
    return max(1, -(-seconds // 60))


MiB = Annotated[int, BeforeValidator(parse_memory_mib)]
Seconds = Annotated[int, BeforeValidator(parse_duration)]
