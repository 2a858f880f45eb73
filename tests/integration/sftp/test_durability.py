"""A CLOSEd upload is durable whatever happens next; an unfinished one leaves nothing."""

from __future__ import annotations

import hashlib
import os
import resource
from collections.abc import Callable, Iterator

import pytest

from ingestd.daemon.wiring import make_intake
from ingestd.db.database import Database
from ingestd.db.pgcluster import EmbeddedPostgres
from ingestd.db.schema import migrate
from ingestd.runtime import metrics
from ingestd.sources.sftp.service import SftpService
from ingestd.sources.sftp.spool import Spool
from ingestd.sources.sftp.spool_intake import SpoolIntake
from tests.conftest import private_cluster, wait_until
from tests.fixtures.files import pdf_bytes
from tests.integration.sftp.conftest import Rig

# What serve runs by default: sessions on SFTP processes.
pytestmark = pytest.mark.sftp_processes(2)


def test_disconnect_mid_upload_leaves_no_document(rig: Rig) -> None:
    """The connection drops before CLOSE: no document, the partial file is removed."""
    with rig.paramiko() as sftp:
        fh = sftp.open("half.pdf", "wb")
        fh.write(pdf_bytes("half", pad_to=300_000, seed=1)[:200_000])
        fh.flush()
        wait_until(lambda: len(rig.partials()) == 1)
        sftp.get_channel().get_transport().close()  # type: ignore[union-attr]
    wait_until(lambda: rig.partials() == [])
    wait_until(lambda: rig.logs("sftp.upload_aborted"))
    rig.wait_idle()
    assert rig.documents() == []
    rig.wait_usage("scan1", 0)
    with rig.paramiko() as sftp:
        assert sftp.listdir("/") == []


def test_spool_survives_restart(make_rig: Callable[..., Rig]) -> None:
    """Acknowledged uploads still queued when the service stops are ingested after a restart."""
    rig = make_rig()
    with rig.db.transaction() as tx:
        tx.raw("UPDATE tenants SET status = 'suspended' WHERE name = 'acme'")
    with rig.paramiko() as sftp:
        for i in range(3):
            sftp.put(str(rig.write_pdf(f"r{i}.pdf", 30 + i)), f"r{i}.pdf")
    rig.service.stop()
    assert len(list(rig.spool.queue_dir.glob("*.data"))) == 3
    # A partial left by a crash mid-upload is cleaned at start, not ingested.
    (rig.spool.partial_dir / "scan1.crashed").write_bytes(b"%PDF-1.4 half")
    with rig.db.transaction() as tx:
        tx.raw("UPDATE tenants SET status = 'active' WHERE name = 'acme'")
    again = SftpService(rig.config, make_intake(rig.config, rig.db))
    again.start()
    try:
        wait_until(lambda: len(rig.documents()) == 3, timeout=60)
        assert not (rig.spool.partial_dir / "scan1.crashed").exists()
        assert sorted(d["original_filename"] for d in rig.documents()) == [
            "r0.pdf",
            "r1.pdf",
            "r2.pdf",
        ]
        wait_until(again.loop.idle)
        assert list(rig.spool.queue_dir.iterdir()) == []
    finally:
        again.stop()


@pytest.fixture
def own_cluster() -> Iterator[EmbeddedPostgres]:
    """A private cluster this test may stop and start."""
    with private_cluster(5434) as cluster:
        yield cluster


def test_postgres_down_during_50_uploads(
    make_rig: Callable[..., Rig], own_cluster: EmbeddedPostgres
) -> None:
    """With Postgres stopped, 50 uploads are all acknowledged and all ingested once it returns."""
    with Database(own_cluster.conninfo, connect_timeout=2) as db:
        migrate(db)
        with db.transaction() as tx:
            tx.one("tenant_insert", {"name": "acme", "status": "active"})
            tx.one("tenant_insert", {"name": "beta", "status": "active"})
        rig = make_rig(database=db)
        own_cluster.stop("fast")
        payloads = [pdf_bytes(f"down {i}", pad_to=30_000, seed=500 + i) for i in range(50)]
        with rig.paramiko() as sftp:
            for i, data in enumerate(payloads):
                with sftp.open(f"down-{i:02d}.pdf", "wb") as fh:
                    fh.write(data)  # leaving the block sends CLOSE; an error would raise here
        # Acked means durable on disk; an SFTP process tells the daemon's index a moment later.
        wait_until(lambda: rig.spool.snapshot()["pending"] == 50, timeout=30)
        wait_until(lambda: rig.logs("spool.retry"))
        assert rig.documents_or_none() is None
        own_cluster.start()
        docs = rig.wait_documents(50, timeout=120)
        assert {d["sha256"] for d in docs} == {hashlib.sha256(p).hexdigest() for p in payloads}
        rig.wait_idle()
        rig.service.stop()


def test_write_error_fails_the_upload_instead_of_ingesting_a_torso(inproc_rig: Rig) -> None:
    """A failing write (here: file size limit, as with a full disk) makes CLOSE fail too."""
    rig = inproc_rig  # the limit is set on this process
    import resource
    import signal

    src = rig.write_pdf("big.pdf", 70, size=400_000)
    old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, hard))
    try:
        with rig.paramiko() as sftp, pytest.raises(OSError):  # noqa: PT011
            sftp.put(str(src), "torso.pdf")
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, old_handler)
    assert "write_error" in [r["reason"] for r in rig.logs("sftp.refused")]
    wait_until(lambda: rig.partials() == [])
    rig.wait_idle()
    assert rig.documents() == []
    rig.wait_usage("scan1", 0)


def test_filesystem_errors_answer_and_log(rig: Rig) -> None:
    """A path too long for the filesystem gets an SFTP error and a log line, not a crash."""
    with rig.paramiko() as sftp:
        path, failed = "", None
        for i in range(30):  # 30 x 192 bytes: longer than PATH_MAX (4096)
            path += f"/{i:02d}" + "d" * 190
            try:
                sftp.mkdir(path)
            except OSError as exc:
                failed = exc
                break
        assert failed is not None
        assert sftp.listdir("/")  # the session still works
    assert any(r["reason"].startswith("os_") for r in rig.logs("sftp.refused"))


def test_descriptors_exhausted_keep_an_acknowledged_upload_in_the_spool(
    make_rig: Callable[..., Rig],
) -> None:
    """Spool intake out of file descriptors: the acknowledged upload stays in the spool
    (retried, never quarantined) and is ingested once descriptors are back."""
    rig = make_rig()
    with rig.db.transaction() as tx:
        tx.raw("UPDATE tenants SET status = 'suspended' WHERE name = 'acme'")
    with rig.paramiko() as sftp:
        sftp.put(str(rig.write_pdf("kept.pdf", 41)), "kept.pdf")
    rig.service.stop()
    with rig.db.transaction() as tx:
        tx.raw("UPDATE tenants SET status = 'active' WHERE name = 'acme'")
    spool = Spool(rig.config.paths.spool, rig.config.sftp.temp_names).open()
    failed = rig.config.paths.state_dir / "failed"
    loop = SpoolIntake(
        spool, make_intake(rig.config, rig.db), failed_root=failed, retry_max_delay=1
    )
    retried = metrics.SPOOL_RETRIED.labels("acme", "source")
    before = retried._value.get()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    hog: list[int] = []
    try:
        try:
            resource.setrlimit(
                resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 64, hard)
            )
            while True:
                hog.append(os.open("/dev/null", os.O_RDONLY))
        except OSError:
            pass  # EMFILE: the table is full
        loop.start()
        wait_until(lambda: retried._value.get() > before, timeout=60)
        # Only stat(2) here: listing a directory needs a descriptor too.
        assert spool.snapshot()["pending"] == 1
        assert not failed.exists()
    finally:
        for fd in hog:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    try:
        wait_until(
            lambda: [d["original_filename"] for d in rig.documents()] == ["kept.pdf"], timeout=60
        )
        wait_until(loop.idle)
        assert list(spool.queue_dir.iterdir()) == []
    finally:
        loop.stop()
    assert not failed.exists() or not any(failed.rglob("*.error.txt"))
