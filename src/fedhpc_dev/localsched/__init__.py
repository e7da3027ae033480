"""localsched: a small batch scheduler that runs jobs as local processes (the `process` dialect).

File-based state under a root folder, one fcntl lock per invocation, FIFO with EASY backfill,
GPU indices as CUDA_VISIBLE_DEVICES, wall-time enforcement. Run it as
`python -m fedhpc_dev.localsched --root DIR VERB` (see `__main__`); docs/site-profiles.md.
"""

from __future__ import annotations

__all__: list[str] = []
