"""Helpers the PBS Pro and LSF dialects share: directive guard, JSON, sizes, health, ids."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from fedhpc.adapters.command import BatchSection, CommandResult
from fedhpc.adapters.dialects import common
from fedhpc.domain.site import Health

__all__ = [
    "as_int",
    "check_ids",
    "check_user",
    "directive",
    "error_text",
    "health_of",
    "load_json",
    "size_mib",
]


def directive(prefix: str, flag: str, value: str | int, *, sep: str = " ") -> str:
    """`common.directive`, also refusing values that start with '-': qsub and bsub could read
    such a value as another option."""
    if str(value).startswith("-"):
        raise ValueError(f"unsafe value for {flag}: {value!r} starts with '-'")
    return common.directive(prefix, flag, value, sep=sep)


def load_json(text: str) -> dict[str, Any] | None:
    """The JSON object in `text`, or None. strict=False: PBS emits raw control characters."""
    start = text.find("{")
    if start < 0:
        return None
    try:
        data = json.loads(text[start:], strict=False)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def as_int(value: object, default: int = 0) -> int:
    """An int from a JSON number or numeric string ('4', '4.0'); `default` otherwise."""
    if isinstance(value, bool):
        return default
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value)
    if isinstance(value, str):
        text = value.strip()
        try:
            return int(float(text)) if text else default
        except ValueError:
            return default
    return default


# PBS sizes: '384000000kb', '8gb', '0kb', '512mb', '16w' (words of 8 bytes), plain bytes.
# LSF memory: '245G', '1.2T', '512M', '5.2 Gbytes'.
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgtp]?)(b|w|bytes)?\s*$", re.IGNORECASE)
_TO_MIB = {"": 1 / 1024**2, "k": 1 / 1024, "m": 1.0, "g": 1024.0, "t": 1024.0**2, "p": 1024.0**3}


def size_mib(value: object, *, bare_unit: str = "") -> int:
    """Whole MiB from a scheduler size string; `bare_unit` is the unit of a bare number."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        value = f"{value}{bare_unit}"
    if not isinstance(value, str):
        return 0
    m = _SIZE.match(value)
    if not m:
        return 0
    number = float(m.group(1))
    prefix = (m.group(2) or (bare_unit if m.group(3) is None else "")).lower()
    factor = _TO_MIB.get(prefix, 0.0)
    if (m.group(3) or "").lower() == "w":
        factor *= 8  # a PBS word is 8 bytes (pbs_resources(7B), "size")
    return int(number * factor)


def error_text(result: CommandResult) -> str:
    """The scheduler's own words for a failure: stderr, else stdout, else the exit status."""
    text = (result.stderr or result.stdout).strip()
    return text or f"exit status {result.returncode}"


_USER = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.@-]{0,63}$")


def check_user(user: str) -> str:
    """A login name safe as an option value (never starts with '-')."""
    if not _USER.match(user):
        raise ValueError(f"not a user name: {user!r}")
    return user


def check_ids(job_ids: Sequence[str], pattern: re.Pattern[str], scheduler: str) -> list[str]:
    """Job ids as argv elements; each must look like one of `scheduler`'s ids."""
    if not job_ids:
        raise ValueError("no job ids given")
    for job_id in job_ids:
        if not pattern.match(job_id):
            raise ValueError(f"not a {scheduler} job id: {job_id!r}")
    return list(job_ids)


def _section_ok(sec: BatchSection | None) -> bool:
    return sec is not None and sec.returncode == 0


def health_of(
    sections: Mapping[str, BatchSection],
    main: str,
    optional: Iterable[str],
    ok: Callable[[BatchSection | None], bool] = _section_ok,
) -> tuple[Health, list[str]]:
    """OFFLINE if the main section failed, DEGRADED if any other wanted section did."""
    if not ok(sections.get(main)):
        return Health.OFFLINE, [main]
    bad = [name for name in optional if not ok(sections.get(name))]
    return (Health.DEGRADED if bad else Health.OK), bad
