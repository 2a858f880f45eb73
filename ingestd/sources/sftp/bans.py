"""Brute-force defence: score failed logins per source IP and ban repeat offenders.

A ban closes new connections from that IP before the SSH handshake (no CPU spent on key
exchange for an attacker). Each repeat ban doubles in length. Bans are kept in a small
JSON file under the state directory so they survive restarts and `ingestd status` (a
separate process) can show them.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from dataclasses import dataclass, field
from ipaddress import ip_address
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ingestd.config.settings import SftpBansConfig
from ingestd.durable import fsync_dir
from ingestd.log import get_logger
from ingestd.runtime import metrics, statedir

if TYPE_CHECKING:
    from ingestd.events.outbox import EventLog

STATE_FILE = "sftp-bans.json"
# `ingestd sftp unban IP` leaves a file named after the IP here; the server (the only
# writer of STATE_FILE) lifts the ban when that IP next connects, or at start.
UNBAN_DIR = "sftp-unban"
# How long a past ban still counts towards the length of the next one.
_REPEAT_MEMORY = 30 * 86400.0


@dataclass
class _Record:
    score: int = 0
    first: float = 0.0  # wall-clock start of the observation window
    until: float = 0.0  # banned until (wall clock); 0 = not banned
    bans: int = 0  # how many times this IP has been banned
    last_ban: float = 0.0
    failures: list[float] = field(default_factory=list)


def state_path(state_dir: Path) -> Path:
    return state_dir / STATE_FILE


def request_unban(state_dir: Path, ip: str) -> str:
    """Ask the server to lift the ban of ``ip``; returns the normalised address."""
    addr = ip_address(ip).compressed  # ValueError for anything that is not an address
    folder = state_dir / UNBAN_DIR
    # Made by root (`sudo ingestd sftp unban`): the server, running as the state
    # directory's owner, must list and remove these.
    statedir.make_dirs(state_dir, folder, 0o700)
    request = folder / addr
    request.touch(mode=0o600)
    statedir.adopt(state_dir, request)
    return addr


# Failed logins of the other front doors (the web console, WebDAV; issue 31): one file per
# address, a line per failure, appended by them and absorbed by the server (the only
# writer of STATE_FILE) within seconds, so an address guessing passwords in a browser is
# banned from SFTP too, and the other way round (they refuse what STATE_FILE bans).
REPORT_DIR = "login-failures"
_MAX_REPORT = 64 * 1024
_TAKEN = ".taken-"


def report_failure(state_dir: Path, ip: str, *, unknown_user: bool = False) -> None:
    """Tell the server of one failed login from ``ip`` elsewhere (ValueError for anything
    that is not an address)."""
    addr = ip_address(ip).compressed
    folder = state_dir / REPORT_DIR
    statedir.make_dirs(state_dir, folder, 0o700)
    fd = os.open(
        folder / addr, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
    )
    try:
        os.write(fd, b"unknown\n" if unknown_user else b"wrong\n")
    finally:
        os.close(fd)


def read_bans(state_dir: Path, now: float | None = None) -> list[dict[str, Any]]:
    """The bans in force, for `ingestd status` (reads the file the server writes)."""
    now = time.time() if now is None else now
    try:
        data = json.loads(state_path(state_dir).read_text())
    except (FileNotFoundError, ValueError):
        return []
    out = []
    for ip, rec in sorted(data.get("ips", {}).items()):
        until = float(rec.get("until", 0))
        if until > now:
            out.append(
                {
                    "ip": ip,
                    "until": until,
                    "remaining": int(until - now),
                    "bans": int(rec.get("bans", 1)),
                }
            )
    return out


class BanList:
    def __init__(
        self, cfg: SftpBansConfig, state_dir: Path | None, events: EventLog | None = None
    ) -> None:
        self.cfg = cfg
        # A ban is an operator event (sftp.banned): someone should know a scanner or an
        # attacker is locked out.
        self.events = events
        self._path = state_path(state_dir) if state_dir is not None else None
        self._unban_dir = state_dir / UNBAN_DIR if state_dir is not None else None
        self._lock = threading.Lock()
        self._records: dict[str, _Record] = {}
        self.log = get_logger(component="sftp")
        self._load()

    def _load(self) -> None:
        if self._path is None:
            return
        try:
            data = json.loads(self._path.read_text())
        except (FileNotFoundError, ValueError):
            return
        for ip, rec in data.get("ips", {}).items():
            self._records[ip] = _Record(
                until=float(rec.get("until", 0)),
                bans=int(rec.get("bans", 0)),
                last_ban=float(rec.get("last_ban", 0)),
            )
        if self._unban_dir is not None and self._unban_dir.is_dir():
            for request in self._unban_dir.iterdir():
                self._lift_requested(request.name)

    def _lift_requested(self, ip: str) -> bool:
        """Apply an unban request for ``ip`` if there is one (the caller may hold the lock
        or be __init__)."""
        if self._unban_dir is None:
            return False
        request = self._unban_dir / ip
        if not request.exists():
            return False
        rec = self._records.pop(ip, None)
        self._save()
        with contextlib.suppress(FileNotFoundError):
            request.unlink()
        self.log.info("sftp.unbanned", remote_ip=ip, was_banned=rec is not None)
        return True

    def _save(self) -> None:
        if self._path is None:
            return
        now = time.time()
        ips = {
            ip: {"until": r.until, "bans": r.bans, "last_ban": r.last_ban}
            for ip, r in self._records.items()
            if r.bans and (r.until > now or now - r.last_ban < _REPEAT_MEMORY)
        }
        tmp = self._path.with_name(f".tmp-{self._path.name}")
        with open(tmp, "w") as fh:
            json.dump({"version": 1, "ips": ips}, fh, indent=1)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self._path)
        with contextlib.suppress(OSError):
            fsync_dir(self._path.parent)

    def _safelisted(self, ip: str) -> bool:
        with contextlib.suppress(ValueError):
            addr = ip_address(ip)
            return any(addr in net for net in self.cfg.safelist)
        return False

    def banned_until(self, ip: str) -> float | None:
        # Fix: the safelist is checked here too, not only when counting failures: a ban
        # made before the admin safelisted the network (kept in the state file) must not
        # keep locking it out.
        if not self.cfg.enabled or self._safelisted(ip):
            return None
        with self._lock:
            rec = self._records.get(ip)
            if rec is not None and rec.until > time.time():
                if self._lift_requested(ip):
                    return None
                return rec.until
        return None

    def failure(self, ip: str, *, unknown_user: bool) -> float | None:
        """Count one failed login; returns the ban end time if this failure bans the IP."""
        if not self.cfg.enabled or self._safelisted(ip):
            return None
        cfg = self.cfg
        points = cfg.score_unknown_user if unknown_user else cfg.score_wrong_password
        now = time.time()
        with self._lock:
            rec = self._records.setdefault(ip, _Record())
            if rec.until > now:
                return rec.until
            if now - rec.first > cfg.observation:
                rec.score, rec.first = 0, now
            rec.score += points
            if rec.score < cfg.threshold:
                return None
            if now - rec.last_ban > _REPEAT_MEMORY:
                rec.bans = 0
            rec.bans += 1
            length = min(cfg.ban_time * 2 ** (rec.bans - 1), cfg.max_ban_time)
            rec.until, rec.last_ban, rec.score = now + length, now, 0
            self._save()
        # fail2ban-friendly: one line with a fixed event name and the remote_ip key.
        self.log.warning("sftp.banned", remote_ip=ip, seconds=int(length), ban_count=rec.bans)
        metrics.SFTP_BANS.inc()
        if self.events is not None:
            self.events.emit(
                "sftp.banned",
                "warning",
                None,
                {"remote_ip": ip, "seconds": int(length), "ban_count": rec.bans},
            )
        return rec.until

    def absorb_reports(self) -> int:
        """Count the failures the other front doors reported (report_failure) as if they
        had happened here; each report is taken (renamed) before it is read, so none is
        counted twice. Returns how many were counted."""
        if self._path is None:
            return 0
        folder = self._path.parent / REPORT_DIR
        try:
            names = [p.name for p in folder.iterdir()]
        except OSError:  # none yet, or no descriptor free right now: the next tick
            return 0
        counted = 0
        for name in names:
            if name.startswith(_TAKEN):  # taken by a tick that could not read it
                address, taken = name[len(_TAKEN) :].rpartition("-")[0], folder / name
            else:
                address, taken = name, folder / f"{_TAKEN}{name}-{os.getpid()}"
            try:
                ip = ip_address(address).compressed
            except ValueError:
                continue  # not ours: left alone
            if taken.name != name:
                try:
                    os.rename(folder / name, taken)
                except OSError:
                    continue
            try:
                with open(taken, "rb") as fh:
                    lines = fh.read(_MAX_REPORT).splitlines()[:1000]
            except OSError:  # no descriptor free: it stays taken for the next tick
                continue
            taken.unlink(missing_ok=True)
            for line in lines:
                self.failure(ip, unknown_user=line.strip() == b"unknown")
                counted += 1
        return counted

    def lift(self, ip: str) -> bool:
        with self._lock:
            rec = self._records.pop(ip, None)
            self._save()
        return rec is not None

    def active(self) -> list[dict[str, Any]]:
        now = time.time()
        with self._lock:
            return [
                {"ip": ip, "until": r.until, "remaining": int(r.until - now), "bans": r.bans}
                for ip, r in sorted(self._records.items())
                if r.until > now
            ]
