"""provision-tenant and delete-tenant (seed 004): a tenant's start and end.

provision-tenant runs while the tenant is ``creating`` (and again, changing nothing, once
it is ``active``): its directories, the system capability sets, its initial members and
its search configuration, then ``active``.

delete-tenant is one of the two pieces of code that may remove archived files, so it
refuses unless everything agrees: the tenant is ``deleting`` (the runner's tenant guard),
the request's HMAC signature matches (ingestd/tenants/signing.py) with the job's own tenant id,
it is at most five minutes old, and its nonce was never used by another job. It then
waits until no other job of the tenant still runs, removes the tenant's files (archive,
derived, spool queue, quarantine) in the child, and the worker removes the rows in the
transaction that marks the job done: the tenant row too (``delete``), or it is left empty
in ``final_status`` with fresh capability sets (``reset``). A crash half-way leaves the
tenant ``deleting`` with the job retried; every step is idempotent.
"""

from __future__ import annotations

import contextlib
import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ingestd.archive import audit, retention
from ingestd.archive.audit import AuditKind
from ingestd.archive.backends import make_archive
from ingestd.archive.store import remove_tree
from ingestd.config.settings import TENANT_NAME, Config
from ingestd.db.database import Tx, jsonb
from ingestd.errors import ArchiveLocked, IngestdError
from ingestd.jobkinds import JobKind
from ingestd.people import capabilities
from ingestd.queue.claims import Job
from ingestd.states import TenantStatus
from ingestd.tenants import signing
from worker.jobs import JobContext, PermanentError, register

# tesseract language -> Postgres text search configuration for the tenant's documents.
SEARCH_CONFIGS = {
    "deu": "german",
    "eng": "english",
    "fra": "french",
    "ita": "italian",
    "spa": "spanish",
    "nld": "dutch",
    "por": "portuguese",
    "swe": "swedish",
    "dan": "danish",
    "nor": "norwegian",
    "fin": "finnish",
    "rus": "russian",
    "tur": "turkish",
    "hun": "hungarian",
}
WAIT_FOR_RUNNING = 0.5  # seconds between looks at the tenant's still-running jobs
RUNNING_WAIT_MAX = 600.0  # then the attempt fails and is retried


class TenantJobsRunning(IngestdError):
    """Jobs of the tenant that started before it was marked deleting still run; retried."""

    transient = True


def tenant_dirs(config: Config, tenant: str) -> list[Path]:
    """The tenant's own directories outside the archive (derived data, refused files);
    the name is checked again (it is a path component). Its archive is the store's."""
    import re

    if not re.match(TENANT_NAME, tenant):
        raise PermanentError(f"tenant name {tenant!r} is not a safe path component")
    p = config.paths
    return [p.derived_dir / tenant, p.state_dir / "failed" / tenant]


# -- provision ------------------------------------------------------------------------------
def apply_provision(tx: Tx, job: Job, data: dict[str, Any]) -> None:
    ids = {"tenant_id": job.tenant_id}
    tx.run("capability_sets_ensure", {**ids, "sets": jsonb(capabilities.system_sets())})
    tx.run("people_ensure", {"members": data["members"]})
    tx.run(
        "tenant_members_add",
        {**ids, "members": data["members"], "capability_set": capabilities.MEMBER_SET},
    )
    tx.run("tenant_search_ensure", {**ids, "config": data["search_config"]})
    tx.run("tenant_activate_provisioned", ids)


@register(
    JobKind.provision_tenant,
    tenant_status=(TenantStatus.creating, TenantStatus.active),
    apply=apply_provision,
)
def provision_tenant(ctx: JobContext) -> None:
    members = ctx.job.payload.get("members", [])
    if not isinstance(members, list) or not all(
        isinstance(m, str) and 0 < len(m) <= 200 for m in members
    ):
        raise PermanentError("provision-tenant: payload 'members' must be a list of names")
    derived = tenant_dirs(ctx.config, ctx.job.tenant)[0]  # (the name checked first)
    make_archive(ctx.config).prepare_tenant(ctx.job.tenant)
    derived.mkdir(mode=0o750, parents=True, exist_ok=True)
    first = ctx.config.analysis.languages_for(ctx.job.tenant)[0]
    search_config = SEARCH_CONFIGS.get(first, "simple")
    ctx.data = {"members": members, "search_config": search_config}
    ctx.result.update(members=len(members), search_config=search_config)


# -- delete ---------------------------------------------------------------------------------
def apply_delete(tx: Tx, job: Job, data: dict[str, Any]) -> None:
    ids = {"tenant_id": job.tenant_id, "job_id": job.id}
    wiped = tx.one("tenant_wipe", ids)
    audit.append(
        tx,
        chain=job.tenant_id,
        tenant=job.tenant,
        kind=AuditKind.tenant_deleted if data["remove_tenant"] else AuditKind.tenant_reset,
        detail={
            "documents": int(wiped["documents"]) if wiped else 0,
            "files_removed": data.get("files_removed", 0),
            "nonce": data["nonce"],
            "final_status": None if data["remove_tenant"] else data["final_status"],
            # Documents removed within their retention, and the operator's reason.
            "retained": data.get("retained", 0),
            "override_retention": data.get("override_retention"),
            "job": job.id,
        },
    )
    tx.run("tenant_wipe_taxonomy", {"tenant_id": job.tenant_id})
    tx.run("arrivals_wipe", {"tenant": job.tenant})  # its files' arrivals (0017)
    if data["remove_tenant"]:
        tx.run("tenant_wipe_capabilities", {"tenant_id": job.tenant_id})
        tx.run("tenant_remove", {"tenant_id": job.tenant_id})
    else:  # reset: an empty tenant, ready again (capability sets kept, search recreated)
        tx.run(
            "capability_sets_ensure",
            {"tenant_id": job.tenant_id, "sets": jsonb(capabilities.system_sets())},
        )
        tx.run(
            "tenant_search_ensure", {"tenant_id": job.tenant_id, "config": data["search_config"]}
        )
        tx.run("tenant_leave_empty", {"tenant_id": job.tenant_id, "status": data["final_status"]})
    tx.run("tenant_nonce_finished", {"nonce": data["nonce"]})


@register(JobKind.delete_tenant, tenant_status=(TenantStatus.deleting,), apply=apply_delete)
def delete_tenant(ctx: JobContext) -> None:
    job, cfg = ctx.job, ctx.config
    try:
        secret = signing.server_secret(cfg.paths.state_dir, create=False)
        request = signing.verify(secret, job.tenant_id, job.tenant, job.payload)
    except signing.SignatureRefused as exc:
        raise PermanentError(exc.message) from None
    except Exception as exc:  # no readable secret: nothing can be verified
        message = getattr(exc, "message", str(exc))
        raise PermanentError(f"delete-tenant refused: {message}; nothing was deleted") from None
    with ctx.db.transaction() as tx:
        used = tx.one(
            "tenant_nonce_use",
            {
                "nonce": request.nonce,
                "job_id": job.id,
                "tenant_id": job.tenant_id,
                "tenant_name": job.tenant,
                "action": request.action,
            },
        )
    if used is None or int(used["job_id"]) != job.id:
        raise PermanentError(
            f"delete-tenant refused: nonce {request.nonce} was already used "
            f"by job {used and used['job_id']} (a replayed request); "
            "nothing was deleted"
        )
    policy = retention.policy_for(cfg.retention, job.tenant)
    with ctx.db.transaction() as tx:
        retention.record_policy(tx, job.tenant_id, job.tenant, policy)
        found = retention.blockers(tx, job.tenant_id, policy, datetime.now(UTC).date())
    if found.held or found.tenant_holds or (found.retained and not request.override_retention):
        raise PermanentError(f"delete-tenant refused: {found.describe()}; nothing was deleted")
    ctx.log.warning(
        "tenant.delete_verified",
        action=request.action,
        remove_tenant=request.remove_tenant,
        nonce=request.nonce,
        issued_at=request.issued_at.isoformat(),
    )
    with ctx.db.transaction() as tx:
        tx.run("tenant_queued_jobs_delete", {"tenant_id": job.tenant_id, "job_id": job.id})
    wait_for_running_jobs(ctx)
    dirs = tenant_dirs(cfg, job.tenant)  # (the name checked first)
    try:
        removed = make_archive(cfg).remove_tenant(job.tenant)
    except ArchiveLocked as exc:  # checked for every object before any goes
        raise PermanentError(f"delete-tenant refused: {exc.message}") from None
    for d in dirs:
        removed += remove_tree(d)
    removed += remove_spool_entries(cfg.paths.spool, job.tenant)
    first = cfg.analysis.languages_for(job.tenant)[0]
    ctx.data = {
        "remove_tenant": request.remove_tenant,
        "final_status": request.final_status,
        "nonce": request.nonce,
        "search_config": SEARCH_CONFIGS.get(first, "simple"),
        "files_removed": removed,
        "override_retention": request.override_retention if found.retained else None,
        "retained": found.retained,
    }
    final = None if request.remove_tenant else request.final_status
    ctx.result.update(action=request.action, files_removed=removed, final_status=final)


def wait_for_running_jobs(ctx: JobContext) -> None:
    """Jobs of the tenant that started before it was marked deleting would write their
    files after ours are gone: wait until they ended (none can start: the tenant is
    deleting); past the bound, fail this attempt (retried with backoff)."""
    ids = {"tenant_id": ctx.job.tenant_id, "job_id": ctx.job.id}
    deadline = time.monotonic() + RUNNING_WAIT_MAX
    while True:  # bounded by the deadline
        with ctx.db.transaction() as tx:
            running = tx.one("tenant_running_jobs", ids)
        n = int(running["n"]) if running else 0
        if n == 0:
            return
        if time.monotonic() > deadline:
            raise TenantJobsRunning(
                f"{n} job(s) of tenant {ctx.job.tenant} still run after "
                f"{RUNNING_WAIT_MAX:.0f} s; retrying"
            )
        time.sleep(WAIT_FOR_RUNNING)


def remove_spool_entries(spool: Path, tenant: str) -> int:
    """Uploads of the tenant still waiting in the SFTP spool queue (metadata + bytes)."""
    queue = spool / "queue"
    removed = 0
    if not queue.is_dir():
        return 0
    for meta in queue.glob("*.json"):
        try:
            entry = json.loads(meta.read_bytes())
        except (OSError, ValueError):
            continue
        if entry.get("tenant") != tenant:
            continue
        for path in (meta.with_suffix(".data"), meta):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
                removed += 1
    return removed
