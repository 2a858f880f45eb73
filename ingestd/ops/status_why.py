"""`ingestd status` says why: what waits, what blocks it, and the command that fixes it.

Built from what the daemon's state file knows (folders it may not use, files left in place
after a failure with their cause, stuck files, uploads in progress), which works during a
database outage, and, with the database up, from its records: tenants that are not active
while their files wait, and the refusals and quarantines of the last 24 hours (operator
events).
"""

from __future__ import annotations

from typing import Any

from ingestd.config.settings import Config
from ingestd.db.database import Tx
from ingestd.textsafe import escaped as shown

REFUSALS_HOURS = 24


def from_database(tx: Tx) -> dict[str, Any]:
    """What only the database knows: tenant statuses, refusals and quarantines."""
    return {
        "tenant_status": {r["name"]: r["status"] for r in tx.all("tenant_statuses")},
        "refusals": [
            {**r, "last_at": r["last_at"].isoformat(timespec="seconds")}
            for r in tx.all("status_refusals", {"hours": REFUSALS_HOURS})
        ],
        "attention": {r["tenant"]: int(r["n"]) for r in tx.all("status_attention_documents")},
    }


def tenant_waits(
    hotfolders: list[dict[str, Any]], statuses: dict[str, str]
) -> list[dict[str, Any]]:
    """Hot folders whose files wait because their tenant is not active (or not there)."""
    out = []
    for h in hotfolders:
        status = statuses.get(h["tenant"], "missing")
        if status == "active" or not h.get("files"):
            continue
        fix = (
            f"ingestd tenant activate {h['tenant']}"
            if status == "suspended"
            else f"ingestd tenant create {h['tenant']}"
            if status == "missing"
            else f"wait: tenant {h['tenant']} is {status}"
        )
        out.append(
            {
                "tenant": h["tenant"],
                "status": status,
                "folder": h["folder"],
                "files": h["files"],
                "fix": fix,
            }
        )
    return out


def build(
    config: Config, report: dict[str, Any], database: dict[str, Any] | None
) -> dict[str, Any]:
    """The ``why`` part of the report (``database`` None: it is down)."""
    daemon = report.get("daemon") or {}
    hot = daemon.get("hotfolders") or {}
    uploads = daemon.get("uploads")
    if uploads is None:  # no daemon reporting: what the spool holds on disk
        from ingestd.sources.sftp.in_progress import uploads_in_progress

        uploads = uploads_in_progress(config.paths.spool, config.sftp.temp_names)
    why: dict[str, Any] = {
        "daemon_reporting": bool(daemon),
        "folders": hot.get("folders") or [],
        "unlistable": hot.get("unlistable") or [],
        "waiting": hot.get("waiting") or {"files": [], "total": 0, "by_tenant": {}},
        "uploads": uploads,
        "tenants_not_active": None,
        "refusals_24h": None,
        "attention": None,
    }
    if database is not None:
        why["tenants_not_active"] = tenant_waits(report["hotfolders"], database["tenant_status"])
        why["refusals_24h"] = database["refusals"]
        why["attention"] = database["attention"]
    return why


def print_folders(why: dict[str, Any]) -> None:
    """Below the hot folders: folders the daemon may not use, files waiting and why."""
    for f in why["folders"]:
        if f.get("missing"):
            print(f"  FOLDER {shown(f['folder'])} [{f['tenant']}]: missing ({f['error']})")
        else:
            print(
                f"  FOLDER {shown(f['folder'])} [{f['tenant']}]: the daemon cannot "
                f"{'/'.join(f['cannot'])} it ({f['error']}; {f['folder_owner']}; "
                f"daemon runs as {f['running_as']})"
            )
        print(f"    fix: {f['fix']}")
    for u in why["unlistable"]:
        print(
            f"  SUB-FOLDER {shown(u['path'])} [{u['tenant']}]: the daemon cannot list it, its "
            f"files are not seen ({u['error']}; {u['folder_owner']})"
        )
        print(f"    fix: {u['fix']}")
    for t in why["tenants_not_active"] or []:
        print(
            f"  WAITING {t['files']} file(s) in {shown(t['folder'])}: tenant {t['tenant']} "
            f"is {t['status']}"
        )
        print(f"    fix: {t['fix']}")
    waiting = why["waiting"]
    for w in waiting["files"]:
        if w["cause"] == "tenant_inactive" and why["tenants_not_active"]:
            continue  # said per folder above
        blocked = (
            f" (blocked by {shown(w['blocked_by'])}: {w['owner_mode']}: {w['error']})"
            if w.get("blocked_by")
            else ""
        )
        print(
            f"  RETRYING {shown(w['path'])} [{w['tenant']}]: {w['cause']}, "
            f"{w['attempts']} attempt(s): {shown(w['detail'])}{blocked}"
        )
        if w.get("fix"):
            print(f"    fix: {w['fix']}")
    if waiting["total"] > len(waiting["files"]):
        print(f"  ... {waiting['total']} file(s) retrying in all, the first shown")


def print_uploads(why: dict[str, Any]) -> None:
    """Uploads still open or waiting for their rename."""
    up = why["uploads"]
    if up["open_total"] or up["temp_named_total"]:
        print(
            f"uploads in progress: {up['open_total']} open ({up['open_bytes']} bytes so far), "
            f"{up['temp_named_total']} closed under a temp name (waiting for the rename)"
        )
        for u in up["open"]:
            print(f"  {u['account']}: {u['bytes']} bytes since {u['opened_at']}")
        for u in up["temp_named"]:
            print(f"  {u['account']}: {shown(u['name'])} ({u['bytes']} bytes)")
    else:
        print("uploads in progress: none")


def print_records(why: dict[str, Any]) -> None:
    """From the database: refusals and quarantines of the last day, attention."""
    if why["refusals_24h"] is not None:
        if why["refusals_24h"]:
            print(f"refused or quarantined in the last {REFUSALS_HOURS} h:")
            for r in why["refusals_24h"]:
                print(
                    f"  {r['tenant'] or '-'}: {r['n']} {r['outcome']} ({r['reason']}), "
                    f"last {r['last_at']}"
                )
        else:
            print(f"refused or quarantined in the last {REFUSALS_HOURS} h: none")
    if why["attention"]:
        total = sum(why["attention"].values())
        print(
            f"documents needing attention: {total} (not failures: see `ingestd documents "
            "attention`, then `documents analyze` or `documents mark-done`)"
        )
