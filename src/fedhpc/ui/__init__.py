"""People's views of fedhpc: the `fedhpc ui` web dashboard (served from the CLI process on
loopback, read-only, built on the daemon's REST API) and the timelines shared with the
terminal pictures of the CLI. Nothing here runs in the daemon."""
