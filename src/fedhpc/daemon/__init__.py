"""The fedhpc daemon: the store's only writer, serving the operations over a Unix socket."""

from fedhpc.daemon.settings import DaemonSettings

__all__ = ["DaemonSettings"]
