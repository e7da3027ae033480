"""The fedhpc daemon: the store's only writer, serving the operations over a Unix socket."""

__all__: list[str] = []
