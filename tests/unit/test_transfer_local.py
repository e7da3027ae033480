"""The local backend and the transfer service on real files: copies between two local-test
sites' storage roots, sha256 checksums, idempotent submission, restarts, and nothing read or
written outside the configured roots."""

from __future__ import annotations

import hashlib
import os
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from fedhpc.domain.config import Site
from fedhpc.errors import FedError
from fedhpc.ops.data import (
    DataLocation,
    MoveDataRequest,
    SyncLevel,
    TransferRequest,
    TransferState,
)
from fedhpc.profiles import load_federation
from fedhpc.store import Store
from fedhpc.transfer import TransferSpec
from fedhpc.transfer.local import LocalBackend
from fedhpc.transfer.records import TransferRecord
from fedhpc.transfer.service import TransferService


@pytest.fixture
def fed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "devfed"
    monkeypatch.setenv("FEDHPC_DEVFED_DIR", str(root))
    monkeypatch.setenv("FEDHPC_DEVFED", "1")
    for site in ("devanvil", "devdeltaai"):
        (root / site / "storage").mkdir(parents=True)
    return root


@pytest.fixture
def sites(fed: Path) -> dict[str, Site]:
    return load_federation()


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    s = await Store.open(tmp_path / "home" / "fedhpc.db")
    yield s
    await s.close()


def _svc(store: Store, sites: dict[str, Site], tmp_path: Path) -> TransferService:
    return TransferService(store, sites, home=tmp_path / "home", cycle_s=0.05)


async def _settle(svc: TransferService, transfer_id: str) -> TransferRecord:
    with anyio.fail_after(20):
        while True:
            await svc.tick()
            rec = await svc.load(transfer_id)
            if rec.state.terminal:
                return rec
            await anyio.sleep(0.05)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


async def test_a_file_is_copied_between_two_sites_with_its_sha256_and_one_event(
    fed: Path, sites: dict[str, Site], store: Store, tmp_path: Path
) -> None:
    src = fed / "devanvil/storage/run1/out.dat"
    src.parent.mkdir(parents=True)
    src.write_bytes(os.urandom(300_000))
    svc = _svc(store, sites, tmp_path)
    handle = await svc.move_data(
        MoveDataRequest(
            source="devanvil:scratch/run1/out.dat", destination="devdeltaai:scratch/in/in.dat"
        )
    )
    assert handle.backend == "local"
    assert any("backend local" in line for line in handle.trace)
    rec = await _settle(svc, handle.transfer_id)
    dst = fed / "devdeltaai/storage/in/in.dat"
    assert rec.state is TransferState.SUCCEEDED
    assert dst.read_bytes() == src.read_bytes()
    assert rec.checksums == {"in.dat": _sha(src)}
    assert (rec.bytes, rec.files, rec.checksum_verified) == (300_000, 1, True)
    assert [(e.kind, e.subject) for e in await store.events_after(0)] == [
        ("transfer.succeeded", handle.transfer_id)
    ]
    await svc.tick()
    assert len(await store.events_after(0)) == 1
    view = await svc.view(TransferRequest(transfer_id=handle.transfer_id))
    assert view.preview is None  # content only on request
    assert view.destination_location.path == str(dst)


async def test_a_folder_is_copied_recursively_and_sync_skips_what_is_already_there(
    fed: Path, sites: dict[str, Site], store: Store, tmp_path: Path
) -> None:
    src = fed / "devanvil/storage/ds"
    (src / "sub").mkdir(parents=True)
    (src / "a.txt").write_text("alpha\n")
    (src / "sub/b.txt").write_text("beta\n")
    svc = _svc(store, sites, tmp_path)
    req = MoveDataRequest(
        source="devanvil:scratch/ds",
        destination="devdeltaai:scratch/ds",
        recursive=True,
        sync_level=SyncLevel.CHECKSUM,
    )
    rec = await _settle(svc, (await svc.move_data(req)).transfer_id)
    assert rec.state is TransferState.SUCCEEDED
    assert set(rec.checksums) == {"a.txt", "sub/b.txt"}
    assert (fed / "devdeltaai/storage/ds/sub/b.txt").read_text() == "beta\n"
    again = req.model_copy(update={"idempotency_key": "second-sync"})
    rec2 = await _settle(svc, (await svc.move_data(again)).transfer_id)
    assert (rec2.state, rec2.files, rec2.bytes) == (TransferState.SUCCEEDED, 0, 0)
    assert rec2.checksums == rec.checksums


async def test_submitting_the_same_submission_id_twice_copies_once(
    fed: Path, tmp_path: Path
) -> None:
    src = fed / "devanvil/storage/x.dat"
    src.write_text("x" * 1000)
    backend = LocalBackend(tmp_path / "state")
    sid = await backend.submission_id()
    spec = TransferSpec(
        transfer_id="x1",
        submission_id=sid,
        source=DataLocation(
            site="devanvil", root="scratch", root_path=str(src.parent), path=str(src)
        ),
        destination=DataLocation(
            site="devdeltaai",
            root="scratch",
            root_path=str(fed / "devdeltaai/storage"),
            path=str(fed / "devdeltaai/storage/x.dat"),
        ),
    )
    assert await backend.submit(spec) == sid
    assert await backend.submit(spec) == sid
    with anyio.fail_after(20):
        while (st := await backend.status(sid)).state is TransferState.ACTIVE:
            await anyio.sleep(0.05)
    assert st.state is TransferState.SUCCEEDED
    assert sorted(p.name for p in (tmp_path / "state").iterdir()) == [sid]
    assert not [p for p in (fed / "devdeltaai/storage").iterdir() if p.name.startswith(".")]


async def test_a_symlink_out_of_the_root_fails_the_transfer_and_reads_nothing_outside(
    fed: Path, sites: dict[str, Site], store: Store, tmp_path: Path
) -> None:
    secret = tmp_path / "outside" / "secret.txt"
    secret.parent.mkdir()
    secret.write_text("never copy me")
    (fed / "devanvil/storage/link.txt").symlink_to(secret)
    (fed / "devanvil/storage/dir").mkdir()
    (fed / "devanvil/storage/dir/escape").symlink_to(secret.parent)
    svc = _svc(store, sites, tmp_path)
    for source, recursive in (("devanvil:scratch/link.txt", False), ("devanvil:scratch/dir", True)):
        h = await svc.move_data(
            MoveDataRequest(
                source=source, recursive=recursive, destination="devdeltaai:scratch/got"
            )
        )
        rec = await _settle(svc, h.transfer_id)
        assert rec.state is TransferState.FAILED
        assert rec.error is not None
        assert rec.error.code == "outside_root"
    assert not (fed / "devdeltaai/storage/got").exists()
    kinds = [e.kind for e in await store.events_after(0)]
    assert kinds == ["transfer.failed", "transfer.failed"]


async def test_a_destination_folder_linked_out_of_the_root_is_never_written(
    fed: Path, sites: dict[str, Site], store: Store, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (fed / "devanvil/storage/in.txt").write_text("data")
    (fed / "devdeltaai/storage/out").symlink_to(outside)
    svc = _svc(store, sites, tmp_path)
    h = await svc.move_data(
        MoveDataRequest(
            source="devanvil:scratch/in.txt", destination="devdeltaai:scratch/out/in.txt"
        )
    )
    rec = await _settle(svc, h.transfer_id)
    assert rec.error is not None
    assert rec.error.code == "outside_root"
    assert list(outside.iterdir()) == []


@pytest.mark.parametrize(
    ("source", "destination", "code"),
    [
        ("devanvil:scratch/../../../etc/passwd", "devdeltaai:scratch/p", "path_traversal"),
        ("devanvil:scratch/a", "devdeltaai:scratch/../x", "path_traversal"),
        ("devanvil:home/a", "devdeltaai:scratch/a", "unknown_root"),
        ("devanvil:scratch/a", "nowhere:scratch/a", "unknown_site"),
    ],
)
async def test_bad_references_are_typed_errors_and_nothing_is_stored(
    sites: dict[str, Site], store: Store, tmp_path: Path, source: str, destination: str, code: str
) -> None:
    svc = _svc(store, sites, tmp_path)
    with pytest.raises(FedError) as exc:
        await svc.move_data(MoveDataRequest(source=source, destination=destination))
    assert exc.value.code == code
    assert await store.count("transfers") == 0


async def test_a_missing_source_fails_with_a_typed_reason(
    sites: dict[str, Site], store: Store, tmp_path: Path
) -> None:
    svc = _svc(store, sites, tmp_path)
    h = await svc.move_data(
        MoveDataRequest(source="devanvil:scratch/none", destination="devdeltaai:scratch/none")
    )
    rec = await _settle(svc, h.transfer_id)
    assert rec.error is not None
    assert rec.error.code == "source_missing"


async def test_a_missing_destination_root_is_named_as_such_not_as_outside_root(
    fed: Path, sites: dict[str, Site], store: Store, tmp_path: Path
) -> None:
    src = fed / "devanvil/storage/a.txt"
    src.write_text("a")
    (fed / "devdeltaai/storage").rmdir()  # the site's storage root was never created
    svc = _svc(store, sites, tmp_path)
    h = await svc.move_data(
        MoveDataRequest(source="devanvil:scratch/a.txt", destination="devdeltaai:scratch/x/a.txt")
    )
    rec = await _settle(svc, h.transfer_id)
    assert rec.error is not None
    assert rec.error.code == "storage_root_missing"
    assert str(fed / "devdeltaai/storage") in rec.error.message and "mkdir" in rec.error.message
    assert not (fed / "devdeltaai/storage").exists()  # never made by a transfer


async def test_a_restarted_service_finishes_a_transfer_from_the_store_alone(
    fed: Path, sites: dict[str, Site], store: Store, tmp_path: Path
) -> None:
    (fed / "devanvil/storage/r.dat").write_bytes(b"r" * 4096)
    first = _svc(store, sites, tmp_path)
    h = await first.move_data(
        MoveDataRequest(source="devanvil:scratch/r.dat", destination="devdeltaai:scratch/r.dat")
    )
    del first  # the daemon died after accepting
    rec = await _settle(_svc(store, sites, tmp_path), h.transfer_id)
    assert rec.state is TransferState.SUCCEEDED
    assert rec.checksums == {"r.dat": hashlib.sha256(b"r" * 4096).hexdigest()}


@pytest.mark.parametrize("live", ["queued", "placing", "submitted", "pending", "running"])
async def test_a_stage_out_waits_while_its_task_lives_whatever_the_live_state(
    sites: dict[str, Site], store: Store, tmp_path: Path, live: str
) -> None:
    # A task retried after a failed try goes back to `queued` (or `placing`) for a moment: its
    # stage-out must keep waiting, not fail as "ended queued: nothing to copy".
    from datetime import UTC, datetime

    from fedhpc.ops.data import TransferOptions
    from fedhpc.transfer import records
    from fedhpc.transfer.refs import resolve

    now = datetime.now(UTC)
    svc = _svc(store, sites, tmp_path)
    rec = TransferRecord(
        id="xstageout0",
        idempotency_key="t1:stage_out:0",
        mode="replicate",
        source_ref="task:t1/out.txt",
        destination_ref="devdeltaai:scratch/out.txt",
        source=None,
        destination=resolve("devdeltaai:scratch/out.txt", sites),
        options=TransferOptions(),
        backend=None,
        state=TransferState.WAITING,
        after_task="t1",
        source_rel="out.txt",
        created_at=now,
    )
    async with store.transaction() as tx:
        await records.put(tx, rec, at=now)
        await tx.put_task("t1", state=live, body={}, at=now)
    await svc.tick()
    assert (await svc.load(rec.id)).state is TransferState.WAITING
    async with store.transaction() as tx:
        await tx.put_task("t1", state="failed", body={}, at=now)
    await svc.tick()
    ended = await svc.load(rec.id)
    assert ended.state is TransferState.FAILED
    assert ended.error is not None and ended.error.code == "upstream_failed"


@pytest.mark.parametrize("ended", ["failed", "cancelled", "completed", None])
async def test_a_stage_out_whose_task_left_no_output_says_what_to_do(
    sites: dict[str, Site], store: Store, tmp_path: Path, ended: str | None
) -> None:
    """Both upstream_failed errors had hint '': the agent read why, not what to do next. A
    completed task that names no accepted attempt is not the task's own failure: its waiting
    tasks hear it (no cause 'upstream', which would keep task.stage_in_failed silent)."""
    from datetime import UTC, datetime

    from fedhpc.ops.data import TransferOptions
    from fedhpc.transfer import records
    from fedhpc.transfer.refs import resolve

    now = datetime.now(UTC)
    svc = _svc(store, sites, tmp_path)
    rec = TransferRecord(
        id="xstageout1",
        idempotency_key="t2:stage_out:0",
        mode="replicate",
        source_ref="task:t2/out.txt",
        destination_ref="devdeltaai:scratch/out.txt",
        source=None,
        destination=resolve("devdeltaai:scratch/out.txt", sites),
        options=TransferOptions(),
        backend=None,
        state=TransferState.WAITING,
        after_task="t2",
        source_rel="out.txt",
        created_at=now,
    )
    async with store.transaction() as tx:
        await records.put(tx, rec, at=now)
        if ended is not None:
            await tx.put_task("t2", state=ended, body={}, at=now)
    await svc.tick()
    out = await svc.load(rec.id)
    assert out.state is TransferState.FAILED and out.error is not None
    assert out.error.code == "upstream_failed"
    if ended == "completed":
        assert "no accepted attempt" in out.error.message
        assert "get_result('t2')" in out.error.hint and "move_data(" in out.error.hint
        assert out.cause is None
    elif ended is None:
        assert "no task t2" in out.error.hint and "stage_out" in out.error.hint
        assert out.cause == "upstream"
    else:
        assert f"ended {ended}" in out.error.message
        assert "get_result('t2') says why" in out.error.hint
        assert "stage_in" in out.error.hint and out.cause == "upstream"


async def test_the_copy_worker_is_started_off_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Starting a worker forks: made on a worker thread, the daemon's loop keeps serving."""
    import subprocess
    import threading

    loop_ran = threading.Event()
    started: list[list[str]] = []

    def run(argv: list[str], **_: object) -> subprocess.CompletedProcess[bytes]:
        if not loop_ran.wait(10):  # spawning on the loop would hold the task that sets it
            raise AssertionError("the loop was held while the worker was started")
        started.append(argv)
        return subprocess.CompletedProcess(argv, 0)

    monkeypatch.setattr("fedhpc.transfer.local.subprocess.run", run)

    async def on_the_loop() -> None:
        await anyio.sleep(0.05)
        loop_ran.set()

    folder = tmp_path / "t1"
    folder.mkdir()
    async with anyio.create_task_group() as tg:
        tg.start_soon(on_the_loop)
        tg.start_soon(LocalBackend(tmp_path)._ensure_worker, folder)
    assert len(started) == 1 and started[0][:2] == ["setsid", "-f"]
