"""What every scheduler's header reader shares: the record of each option's fate, numbers and
sizes read strictly, and the reasons given for what fedhpc does not carry over."""

from __future__ import annotations

import math
import re

from fedhpc.domain.jobscript.model import Directive, Fate
from fedhpc.domain.units import MAX_COUNT, MAX_MEMORY_MIB, parse_duration

__all__ = ["WHY", "Sink", "bytes_mib", "count", "duration", "mib"]

# Why a directive is not carried over (or what fedhpc does instead), by what it asked for.
WHY = {
    "partition": "placement picks the site and partition; pin one with fixed_site or "
    "envelope.preferences",
    "account": "each site's account comes from its config",
    "job_name": "jobs are named fedhpc-<task>-<attempt>",
    "output": "fedhpc keeps stdout and stderr in the task folder (get_result)",
    "array": "runs once, not as an array: use submit_group, one child per index",
    "dependency": "job ids do not cross sites: submit after the result you wait for",
    "constraint": "node features differ between centers: use accelerator_types",
    "qos": "the QoS comes from the site's partition",
    "mail": "fedhpc wakes your session instead of mailing",
    "env": "pass variables with `env`",
    "shell": "the body runs under its #! line",
    "unknown": "not understood; not carried over",
    "interactive": "fedhpc runs batch jobs only",
    "ignored": "after the first command: the scheduler ignores it too",
}

_SIZE = re.compile(r"^(\d{1,15}(?:\.\d{1,6})?)([kmgtp]?)b?$", re.IGNORECASE)
_TO_MIB = {"k": 1 / 1024, "": 1, "m": 1, "g": 1024, "t": 1024**2, "p": 1024**3}
_BYTES = re.compile(r"^(\d{1,18})(b|kb|mb|gb|tb|pb|w|kw|mw|gw|tw)?$", re.IGNORECASE)
_BYTE_SCALE = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4, "p": 1024**5}


class Sink:
    """The directives read so far: each option of each line, with its fate and note."""

    def __init__(self) -> None:
        self.items: list[Directive] = []

    def add(self, line: int, text: str, fate: Fate, note: str) -> None:
        self.items.append(Directive(line=line, text=text, fate=fate, note=note))

    def drop(self, line: int, text: str, why: str) -> None:
        self.add(line, text, "dropped", WHY.get(why, why))


def count(text: str, *, low: int = 1) -> int:
    """A whole count in range; 'a-b' (a min-max range, Slurm -N) reads its minimum."""
    head = text.split("-", 1)[0] if re.match(r"^\d+-\d+$", text) else text
    if not head.isdigit() or not low <= int(head) <= MAX_COUNT:
        raise ValueError(f"{text!r} is not a count from {low} to {MAX_COUNT}")
    return int(head)


def mib(text: str, *, default_unit: str = "m") -> int:
    """A size in whole MiB (rounded up) from '4G', '4000', '4000M', '1.5T'; a bare number is
    in `default_unit` ('m' for Slurm and LSF, 'k' for LSF's default limit unit)."""
    m = _SIZE.match(text.strip())
    if m is None:
        raise ValueError(f"cannot read {text!r} as a size")
    unit = (m.group(2) or default_unit).lower()
    value = math.ceil(float(m.group(1)) * _TO_MIB[unit])
    if not 0 <= value <= MAX_MEMORY_MIB:
        raise ValueError(f"{text!r} is out of range")
    return value


def bytes_mib(text: str) -> int:
    """A PBS size ('200gb', '4096mb', '1048576' bytes, '8w' words of 8 bytes) in MiB, up."""
    m = _BYTES.match(text.strip())
    if m is None:
        raise ValueError(f"cannot read {text!r} as a PBS size (e.g. 64gb)")
    unit = (m.group(2) or "b").lower()
    scale = _BYTE_SCALE[unit[0] if len(unit) == 2 else ""] * (8 if unit.endswith("w") else 1)
    value = math.ceil(int(m.group(1)) * scale / 1024**2)
    if value > MAX_MEMORY_MIB:
        raise ValueError(f"{text!r} is out of range")
    return value


def duration(text: str, *, bare: str) -> int:
    """Seconds from a scheduler's time: clock forms as `parse_duration` reads them; a bare
    number is in `bare` units ('s' PBS, 'm' Slurm and LSF)."""
    if text.isdigit():
        seconds = int(text) * (60 if bare == "m" else 1)
        return parse_duration(seconds)
    return parse_duration(text)
