"""What one registered variable is: its name, type, default, meaning and reader, and how its
value is read (the registry itself: `fedhpc.settings`)."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass

__all__ = ["Bounds", "Default", "Setting", "registrar", "shown"]

Default = str | int | float | bool | None


@dataclass(frozen=True)
class Bounds:
    """A daemon tunable's range: greater than `gt`, at least `ge`, at most `le`."""

    gt: float | None = None
    ge: float | None = None
    le: float | None = None

    def __str__(self) -> str:
        low = f" > {self.gt:g}" if self.gt is not None else ""
        low += f" >= {self.ge:g}" if self.ge is not None else ""
        return low + (f", <= {self.le:g}" if self.le is not None else "")


@dataclass(frozen=True)
class Setting:
    """One variable: what it holds, its default (None: unset), what it means, who reads it.
    `field` is the `DaemonSettings` field it sets, for the daemon's tunables."""

    name: str
    type: str
    default: Default
    meaning: str
    reader: str
    field: str | None = None
    bounds: Bounds | None = None

    def read(self, env: Mapping[str, str] | None = None) -> str | None:
        """The raw value in `env` (default: this process's environment now), else None."""
        return (os.environ if env is None else env).get(self.name)

    def get(self, env: Mapping[str, str] | None = None) -> str | None:
        """The raw value when set (even empty), else the default as text (None: no default)."""
        value = self.read(env)
        if value is not None or self.default is None:
            return value
        return shown(self.default)


def registrar(into: list[Setting], reader: str, *, daemon: bool = False) -> Callable[..., Setting]:
    """A registrar for the variables `reader` reads, each appended to `into` and named
    `FEDHPC_<name>`; a daemon tunable sets the same-named (lower-case) DaemonSettings field,
    within its bounds."""

    def register(name: str, type_: str, default: Default, meaning: str, **bounds: float) -> Setting:
        field, limits = (name.lower(), Bounds(**bounds)) if daemon else (None, None)
        setting = Setting(f"FEDHPC_{name}", type_, default, meaning, reader, field, limits)
        into.append(setting)
        return setting

    return register


def shown(default: str | float | bool) -> str:
    """A default as its variable would be written: 60.0 as 60, True as 1."""
    if isinstance(default, bool):
        return "1" if default else "0"
    if isinstance(default, float) and default.is_integer():
        return str(int(default))
    return str(default)
