"""Floods of one log event are summarised, never one line each."""

from __future__ import annotations

from structlog.testing import capture_logs

from ingestd.log import get_logger
from ingestd.runtime.logflood import FloodGate
from tests.conftest import wait_until


def test_a_flood_is_a_few_lines_and_one_summary() -> None:
    """1,000 handshake failures from one address: the first 5 lines, then one summary
    with the count; another address still gets its own first lines."""
    with capture_logs() as logs:
        gate = FloodGate(get_logger(component="sftp"), interval=0.5, burst=5)
        for i in range(1000):
            gate.log_event(
                "warning",
                "sftp.handshake_failed",
                "127.0.0.9",
                remote_ip="127.0.0.9",
                detail=f"attempt {i}",
            )
        gate.log_event("warning", "sftp.handshake_failed", "127.0.0.10", remote_ip="127.0.0.10")
        wait_until(
            lambda: any(e["event"] == "sftp.handshake_failed.summary" for e in logs), timeout=30
        )
        gate.close()
    lines = [e for e in logs if e["event"] == "sftp.handshake_failed"]
    assert [e["remote_ip"] for e in lines] == ["127.0.0.9"] * 5 + ["127.0.0.10"]
    [summary] = [e for e in logs if e["event"] == "sftp.handshake_failed.summary"]
    assert summary["source"] == "127.0.0.9" and summary["held_back"] == 995
    assert summary["last"]["detail"] == "attempt 999"
    assert summary["log_level"] == "warning"


def test_a_quiet_source_logs_every_line() -> None:
    """Below the burst nothing is held back and no summary is written."""
    with capture_logs() as logs:
        gate = FloodGate(get_logger(), interval=60, burst=5)
        for _ in range(3):
            assert gate.log_event("info", "sftp.login", "scanner-1", username="scanner-1")
        gate.close()
    assert [e["event"] for e in logs] == ["sftp.login"] * 3


def test_keys_are_bounded() -> None:
    """A flood from more sources than the gate tracks shares one bucket past the bound."""
    import ingestd.runtime.logflood as lf

    old, lf.MAX_KEYS = lf.MAX_KEYS, 10
    try:
        with capture_logs() as logs:
            gate = FloodGate(get_logger(), interval=60, burst=1)
            for i in range(100):
                gate.log_event("warning", "sftp.handshake_failed", f"10.0.0.{i}")
            gate.close()
    finally:
        lf.MAX_KEYS = old
    assert len([e for e in logs if e["event"] == "sftp.handshake_failed"]) == 11
    [summary] = [e for e in logs if e["event"].endswith(".summary")]
    assert summary["source"] == lf.OTHERS and summary["held_back"] == 89


def test_a_flood_from_many_sources_is_bounded_too() -> None:
    """1,000 addresses failing 3 times each: at most global_burst lines, the rest counted
    in one summary for all sources."""
    import ingestd.runtime.logflood as lf

    with capture_logs() as logs:
        gate = FloodGate(get_logger(), interval=60, burst=5, global_burst=50)
        for i in range(1000):
            for _ in range(3):
                gate.log_event("warning", "sftp.handshake_failed", f"10.{i // 250}.{i % 250}.1")
        gate.close()
    assert len([e for e in logs if e["event"] == "sftp.handshake_failed"]) == 50
    summaries = [e for e in logs if e["event"].endswith(".summary")]
    assert sum(s["held_back"] for s in summaries) == 3000 - 50
    assert [s["source"] for s in summaries if s["source"] == lf.OTHERS] == [lf.OTHERS]
