"""The scheduler's files under its root: config, job records, scripts, environments, the lock.

Layout: `lock` (fcntl, one holder per invocation), `config.json`, `next_id`, `jobs/<id>.json`
(the record), `jobs/<id>.sh` (the script), `jobs/<id>.env.json` (the submitter's environment),
`log/wrapper.log`. Every write is a temporary file renamed into place.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from fedhpc_dev.localsched.model import Config, Job

__all__ = ["SchedStore"]


def _write(path: Path, text: str, mode: int = 0o600) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    tmp.replace(path)


class SchedStore:
    """File-based state; callers hold `lock()` around every read-modify-write."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.jobs_dir = root / "jobs"
        self.log_dir = root / "log"
        for d in (root, self.jobs_dir, self.log_dir):
            d.mkdir(parents=True, exist_ok=True, mode=0o700)

    @contextmanager
    def lock(self) -> Iterator[None]:
        fd = os.open(self.root / "lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing the descriptor releases the lock

    # -- config --------------------------------------------------------------------------
    def config(self) -> Config | None:
        path = self.root / "config.json"
        if not path.exists():
            return None
        return Config.from_json(json.loads(path.read_text()))

    def write_config(self, config: Config) -> bool:
        """Store `config`; False when it was already the stored one."""
        text = json.dumps(config.to_json(), indent=1, sort_keys=True) + "\n"
        path = self.root / "config.json"
        if path.exists() and path.read_text() == text:
            return False
        _write(path, text, 0o644)
        return True

    # -- jobs ----------------------------------------------------------------------------
    def next_id(self) -> int:
        path = self.root / "next_id"
        current = int(path.read_text()) if path.exists() else 1
        _write(path, f"{current + 1}\n")
        return current

    def save(self, job: Job) -> None:
        _write(self.jobs_dir / f"{job.id}.json", json.dumps(job.to_json()) + "\n")

    def load(self, job_id: int) -> Job | None:
        path = self.jobs_dir / f"{job_id}.json"
        return Job.from_json(json.loads(path.read_text())) if path.exists() else None

    def load_all(self) -> list[Job]:
        jobs = [
            Job.from_json(json.loads(p.read_text()))
            for p in self.jobs_dir.glob("*.json")
            if p.stem.isdigit()
        ]
        return sorted(jobs, key=lambda j: j.id)

    def script_path(self, job_id: int) -> Path:
        return self.jobs_dir / f"{job_id}.sh"

    def save_inputs(self, job_id: int, script: str, env: dict[str, str]) -> None:
        _write(self.script_path(job_id), script, 0o700)
        _write(self.jobs_dir / f"{job_id}.env.json", json.dumps(env))

    def load_env(self, job_id: int) -> dict[str, str]:
        data: Any = json.loads((self.jobs_dir / f"{job_id}.env.json").read_text())
        return {str(k): str(v) for k, v in data.items()}

    @property
    def wrapper_log(self) -> Path:
        return self.log_dir / "wrapper.log"
