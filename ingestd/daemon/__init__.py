"""``ingestd serve`` and its wiring: the daemon's main loop, its state for ``ingestd
status``, its lock, reload requests, and how a Config becomes a database pool and an
intake (wiring.py, also used by the CLI and the worker)."""
