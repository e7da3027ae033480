"""Local federations side by side: instance n's folder, and the file in it that says which
instance it holds (so its ports follow from the folder alone, `FEDHPC_DEVFED_DIR`)."""

from __future__ import annotations

import json
from pathlib import Path

from fedhpc_dev.devfed.plan import Instance
from fedhpc_dev.devfed.setup import write_if_changed

__all__ = ["INSTANCE_FILE", "instance_root", "instances_of", "read_instance", "write_instance"]

INSTANCE_FILE = "instance.json"


def instance_root(primary: Path, number: int) -> Path:
    """Instance 1 is `primary` itself; instance n > 1 sits beside it as `{primary}-n`."""
    return primary if number == 1 else primary.with_name(f"{primary.name}-{number}")


def read_instance(root: Path) -> Instance:
    """The instance `devfed up` recorded in `root`; instance 1 when it recorded none (a folder
    from before instances, or not made yet)."""
    try:
        data = json.loads((root / INSTANCE_FILE).read_text())
        number = int(data["instance"])
        primary = Path(data["primary"]) if data.get("primary") else None
    except (OSError, ValueError, KeyError, TypeError):
        return Instance()
    return Instance(number, primary) if number > 1 and primary else Instance()


def write_instance(root: Path, instance: Instance) -> None:
    """Record which instance `root` holds (world-readable: every test process reads it)."""
    data = {"instance": instance.number, "primary": str(instance.primary or "")}
    write_if_changed(root / INSTANCE_FILE, json.dumps(data) + "\n", 0o644)


def instances_of(primary: Path) -> tuple[Path, ...]:
    """The folders of the instances past the first that `devfed up` made beside `primary`,
    in instance order."""
    found = []
    for path in primary.parent.glob(f"{primary.name}-*"):
        instance = read_instance(path)
        if instance.number > 1 and instance.primary == primary:
            found.append((instance.number, path))
    return tuple(path for _, path in sorted(found))
