"""Arrivals: every file that reaches a source, with what became of it (migration 0017)."""
