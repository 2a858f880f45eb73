"""Operator events (quarantines, refused uploads, bans): decided by the intake side,
buffered on disk while the database is away, written into the outbox the worker
relays into notifications."""
