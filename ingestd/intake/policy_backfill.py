"""The date policy of documents recorded before it was frozen at intake (migration 0024).

Intake now records, with each document, its source's ``date_source`` and the date its
file name gave (``IntakeRecord``), so the analysis never parses a ``source`` string or a
file name. Documents archived by an earlier version have neither; they are filled here,
once, from the config in force at the upgrade (what the analysis used to look up each
time) and with the file name parsed as intake parsed it (the config's placeholder
patterns, the day the document arrived).

Run after every migrate by the commands that hold the config (``ingestd migrate``, the
daemon once the database answers, the worker at its start): after the first run the
partial index ``idx_documents_policy_unset`` is empty and the look costs nothing.
"""

from __future__ import annotations

from datetime import date, datetime

from ingestd.config.settings import Config, DateSource
from ingestd.db.database import Database
from ingestd.filenames.titles import TitleRules, parse_filename

BATCH = 500


def date_source_of(config: Config, source: str) -> DateSource:
    """The ``date_source`` of the hot folder or SFTP account named by a recorded
    ``source`` (``watch:<folder>``, ``sftp:<account>``); the default for any other source
    and for one no longer configured. Only for documents recorded before 0024."""
    kind, _, name = source.partition(":")
    if kind == "watch":
        for folder in config.watch:
            if str(folder.path) == name:
                return folder.date_source
    elif kind == "sftp":
        account = config.sftp.account(name)
        if account is not None:
            return account.date_source
    return "filename-first"


def name_date_of(rules: TitleRules, filename: str, arrived: datetime) -> date | None:
    """The date intake took from a file name (parse_filename with the day it arrived as
    "today": a date after it is none)."""
    return parse_filename(filename, rules, today=arrived.date()).issued


def backfill(config: Config, db: Database, *, batch: int = BATCH) -> int:
    """Fill ``date_policy`` and ``name_date`` of every document that has none; the number
    filled. A batch per transaction: a large archive is not locked in one."""
    rules = TitleRules(config.titles.placeholder_patterns)
    filled, after = 0, 0
    while True:
        with db.transaction() as tx:
            rows = tx.all("documents_policy_unset", {"after": after, "limit": batch})
            for row in rows:
                filled += tx.run(
                    "document_policy_set",
                    {
                        "id": row["id"],
                        "date_policy": date_source_of(config, str(row["source"])),
                        "name_date": name_date_of(
                            rules, str(row["original_filename"]), row["created_at"]
                        ),
                    },
                )
        if len(rows) < batch:
            return filled
        after = int(rows[-1]["id"])
