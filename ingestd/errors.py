"""One error hierarchy for every process; each class carries its process exit code.

Modelled on OCRmyPDF's ``ExitCode``: the CLI maps any ``IngestdError`` to its
``exit_code`` and prints ``message``; nothing else decides exit codes.
"""

from __future__ import annotations

import enum
import os
import pwd


class ExitCode(enum.IntEnum):
    ok = 0
    # Some files in a batch were refused (bad input); the rest were processed.
    refused = 1
    usage = 2
    config_invalid = 3
    database_unavailable = 4
    # ``ingestd verify`` found missing, altered or orphaned archive files.
    archive_inconsistent = 5
    tenant_invalid = 6
    not_found = 7
    external_program = 8
    # ``ingestd status`` could show only what is on disk: the database is down.
    degraded = 9
    # A directory ingestd must write (state, spool, archive) cannot be used: permissions,
    # owner, read-only. Not worth restarting for (systemd: RestartPreventExitStatus).
    state_unusable = 10
    # The audit seals cannot be checked or made: the public key to check them against is
    # missing or unusable, or the sealing key is not the one the trail names.
    key_unusable = 11
    # ``ingestd serve``: another daemon holds the state directory's or the spool's lock.
    already_running = 12
    # ``ingestd serve``: an address to listen on (sftp.listen) is taken by another process.
    address_in_use = 13
    internal = 15


class IngestdError(Exception):
    """Base class: an error with a message meant for a sysadmin and an exit code.

    ``transient`` is the one question every loop asks (hot folders, spool, worker): is the
    input fine and the failure the environment's (a database down or refusing us, a disk
    full, a tenant suspended, a writer still at work), so the same input is kept and
    tried again later? Or is it about the input itself, so trying again cannot help?
    The loops decide from this attribute alone; which class it is only names the cause.
    """

    exit_code: ExitCode = ExitCode.internal
    transient: bool = False
    # Permanent, and about a document itself (encrypted, damaged, over a limit): it stays
    # archived and waits for an operator (re-queue or mark done) instead of failing.
    attention: bool = False

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class UsageError(IngestdError):
    """A command line that contradicts itself (exit 2): nothing was done."""

    exit_code = ExitCode.usage


class ConfigError(IngestdError):
    """The config (or a file it names, like a secret) is wrong: the input waiting on it is
    fine, and is tried again once an operator fixes it (a command exits with the code)."""

    exit_code = ExitCode.config_invalid
    transient = True

    def __init__(self, message: str, problems: list[str] | None = None) -> None:
        super().__init__(message)
        self.problems = problems or [message]


class DatabaseError(IngestdError):
    """A database failure that is not the caller's fault: the input is kept and tried
    again (a process that cannot start without the database exits with its code)."""

    exit_code = ExitCode.database_unavailable
    transient = True


class DatabaseUnavailable(DatabaseError):
    """Transient: the server is down, restarting or unreachable. Retry later, lose nothing."""

    transient = True


class DatabaseRefused(DatabaseError):
    """Permanent: the server answers but will not let us in (no such role or database,
    failed authentication, no pg_hba.conf entry). Retrying fixes nothing; an operator
    must change the config, the server or the user ingestd runs as."""

    exit_code = ExitCode.config_invalid


class SchemaMissing(DatabaseError):
    """Permanent: connected, but the tables (or the schema to create them in) are not
    there: a database that was never migrated, or a search_path that points elsewhere."""

    exit_code = ExitCode.config_invalid


class QueryCanceled(DatabaseError):
    """A statement PostgreSQL cancelled (SQLSTATE 57014): its statement_timeout ran out
    (a bounded search, ingestd/search/limits.py) or someone cancelled it. The caller that
    set the timeout says what it means; elsewhere it is a database error like any other."""


class StateUnusable(IngestdError):
    """A directory or file ingestd must use (state dir, host keys, spool) cannot be read
    or written by this user: wrong owner, mode or a read-only mount. Restarting does
    not help (systemd: RestartPreventExitStatus); a file met meanwhile is kept."""

    exit_code = ExitCode.state_unusable
    transient = True


class AlreadyRunning(IngestdError):
    """Another ``ingestd serve`` holds the state directory or the spool (exit 12): this
    one starts nothing. Not transient: a restart meets the same daemon."""

    exit_code = ExitCode.already_running


class AddressInUse(IngestdError):
    """An address the daemon must listen on is taken by another process (exit 13)."""

    exit_code = ExitCode.address_in_use
    transient = True


class TenantError(IngestdError):
    """The tenant is missing or not active: its files wait where they are."""

    exit_code = ExitCode.tenant_invalid
    transient = True


class TenantNotFound(TenantError):
    pass


class TenantNotActive(TenantError):
    """The tenant exists but is creating, suspended or deleting: leave its files in place."""

    def __init__(self, tenant: str, status: str) -> None:
        super().__init__(f"tenant {tenant!r} is {status}, not active")
        self.tenant = tenant
        self.status = status


class NotFound(IngestdError):
    exit_code = ExitCode.not_found


class ArchiveError(IngestdError):
    """The WORM store could not take or give a file (disk full, permissions, I/O)."""

    exit_code = ExitCode.internal
    transient = True


class ArchiveLocked(ArchiveError):
    """Permanent until a date: the store itself keeps the file (an S3 Object Lock that
    has not expired). Retrying cannot help; nothing was deleted."""

    exit_code = ExitCode.refused
    transient = False


class SourceUnavailable(IngestdError):
    """Transient: a source file could not be opened, read or removed right now for a
    reason outside the file (descriptors or memory exhausted, I/O error, disk full, no
    permission). The file stays where it is and is tried again; only properties of the
    file itself (type, size, name, link) refuse it."""

    exit_code = ExitCode.internal
    transient = True

    def __init__(self, message: str, errno_name: str = "") -> None:
        super().__init__(message)
        self.errno_name = errno_name


class SourceProtected(IngestdError):
    """Intake refused to remove or move a source whose folder resolves into the archive,
    derived or state directory (e.g. a hot folder swapped for a link into the archive
    after start). Permanent: the same file would be refused again, so it is not retried."""

    exit_code = ExitCode.refused


class OutputUnusable(IngestdError):
    """A file or directory a command was told to write into cannot take it (no write
    permission, disk full): nothing was left there."""

    exit_code = ExitCode.refused


def as_whom(exc: OSError) -> str:
    """For a permission refusal, whom the command ran as (root's commands switch to the
    service user, who may not reach root's own directories) and the way out; else ""."""
    if not isinstance(exc, PermissionError):
        return ""
    try:
        user = pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        user = str(os.geteuid())
    return f" (this command runs as the user {user}: choose a directory it may write, or -o -)"
