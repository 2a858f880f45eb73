"""Operator tasks over the whole installation: backup and restore, the checks at start
(preflight, the machine), ``ingestd status`` and its why, the service user, config
warnings, and the metrics endpoint."""
