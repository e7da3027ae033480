"""The accelerator models fedhpc knows by name, whether or not an enabled site has them: site
discovery reads a GPU's memory from here (onboard/build.py), and a filter naming a type outside
these and the sites' own is a typo, not an empty answer (ops/inspect.py)."""

from __future__ import annotations

__all__ = ["GPU_MEMORY_GIB"]

# Memory per GPU of the models HPC centers run, from the vendors' data sheets. Models sold in
# two sizes (A100 40/80 GB, V100 16/32 GB) get the smaller one and are marked for confirmation.
GPU_MEMORY_GIB: dict[str, float] = {
    "a100": 40,
    "a40": 48,
    "a30": 24,
    "a10": 24,
    "h100": 80,
    "h200": 141,
    "gh200": 96,
    "b200": 180,
    "l40": 48,
    "l40s": 48,
    "l4": 24,
    "v100": 16,
    "p100": 16,
    "t4": 16,
    "rtx6000": 24,
    "rtx8000": 48,
    "mi100": 32,
    "mi210": 64,
    "mi250": 64,
    "mi250x": 64,
    "mi300a": 128,
    "mi300x": 192,
    "pvc": 64,
    "max1550": 64,
}
