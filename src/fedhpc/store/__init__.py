"""The daemon's store: SQLite in WAL mode with migrations, an append-only event log, cursors."""

from fedhpc.store.db import Store, Tx, WaitSample
from fedhpc.store.events import Event, event_id
from fedhpc.store.reads import quick_reads

__all__ = ["Event", "Store", "Tx", "WaitSample", "event_id", "quick_reads"]
