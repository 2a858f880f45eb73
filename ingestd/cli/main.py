"""The ``ingestd`` command line. Every command takes --config; parseable output with --json."""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
import traceback
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from ingestd import __version__, log
from ingestd.cli import audit as audit_cli
from ingestd.cli import backup as backup_cli
from ingestd.cli import documents, sftp, system
from ingestd.cli import dropins as dropins_cli
from ingestd.cli import find as find_cli
from ingestd.cli import ingest as ingest_cli
from ingestd.cli import invoices as invoices_cli
from ingestd.cli import jobs as jobs_cli
from ingestd.cli import retention as retention_cli
from ingestd.cli import samples as samples_cli
from ingestd.cli import search as search_cli
from ingestd.cli import tenants as tenant_cli
from ingestd.cli import trace as trace_cli
from ingestd.cli import users as users_cli
from ingestd.cli.common import Handler, load
from ingestd.config.settings import DEFAULT_POOL, Config
from ingestd.errors import ConfigError, ExitCode, IngestdError, UsageError
from ingestd.queue.pools import Pool


# -- worker -----------------------------------------------------------------------------
def cmd_worker(args: argparse.Namespace) -> int:
    from ingestd.daemon.wiring import open_database
    from worker.child import Child
    from worker.lanes import Lanes
    from worker.runner import load_kinds

    config = load(args)
    load_kinds(args.plugin)  # a mistyped --plugin fails before the database is touched
    pool, worker_id, metrics_offset = _worker_pool(config, args)
    children: list[Child] = []

    def start_children(conninfo: str) -> None:
        # Before the pool's threads exist: the job children (one per lane) can be forks
        # of this process, with every module already imported, not fresh interpreters.
        for _ in pool.lane_scopes():
            child = Child(config, conninfo, args.plugin)
            children.append(child)
            child.start(fork=True)

    try:
        with open_database(config, name="ingestd-worker", before_pool=start_children) as db:
            lanes = Lanes(
                config,
                db,
                config_path=args.config,
                plugins=args.plugin,
                worker_id=worker_id,
                drain=args.drain,
                metrics_offset=metrics_offset,
                children=children,
                pool=pool,
            )
            return lanes.run()
    finally:
        for child in children:
            child.stop()  # a no-op once the runner stopped it


def _worker_pool(config: Config, args: argparse.Namespace) -> tuple[Pool, str | None, int | None]:
    """The pool, worker id and metrics offset from --pool, --instance (a systemd instance
    name: ``N`` for the default pool, ``NAME`` or ``NAME-N`` for a pool), --worker-id and
    --metrics-offset; given ones win over what the instance implies."""
    from ingestd.queue import pools

    if args.instance is None:
        return (
            pools.resolve(config.worker, args.pool or DEFAULT_POOL),
            args.worker_id,
            (args.metrics_offset),
        )
    inst = pools.instance(config.worker, args.instance)
    if args.pool is not None and args.pool != inst.pool:
        raise UsageError(
            f"--pool {args.pool} and --instance {args.instance} (pool {inst.pool}) disagree; "
            "give one of them"
        )
    offset = args.metrics_offset if args.metrics_offset is not None else inst.metrics_offset
    worker_id = args.worker_id or f"{socket.gethostname()}-{args.instance}"
    return pools.resolve(config.worker, inst.pool), worker_id, offset


def build_parser() -> argparse.ArgumentParser:
    # --config is accepted before and after the sub-command; SUPPRESS keeps a sub-parser
    # from resetting a value given before it.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--config",
        type=Path,
        default=argparse.SUPPRESS,
        help="config file (default: $INGESTD_CONFIG or /etc/ingestd/ingestd.toml)",
    )
    jsonopt = argparse.ArgumentParser(add_help=False)
    jsonopt.add_argument("--json", action="store_true", help="machine-readable output")

    p = argparse.ArgumentParser(prog="ingestd", description=__doc__)
    # Its own action, not the shared one: parents share Action objects, and a default of
    # None here would leak into every sub-parser.
    p.add_argument("--config", type=Path, default=None, help="config file")
    p.add_argument("--version", action="version", version=f"ingestd {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    system.add_parsers(sub, common, jsonopt)

    tenant_cli.add_parsers(sub, common, jsonopt)

    ingest_cli.add_parser(sub, common, jsonopt)
    documents.add_parsers(sub, common, jsonopt)

    sftp.add_parsers(sub, common, jsonopt)

    # #30 (confd): hot folders as conf.d drop-ins (account add|remove: in sftp.py's group).
    dropins_cli.add_watch_parsers(sub, common)

    system.add_run_parsers(sub, common, jsonopt)

    s = sub.add_parser(
        "worker", parents=[common], help="run jobs, worker.concurrency at once, each in a job child"
    )
    s.add_argument(
        "--drain", action="store_true", help="exit 0 once no job is ready and none is running"
    )
    s.add_argument(
        "--plugin",
        action="append",
        default=[],
        metavar="MODULE",
        help="import MODULE for more job kinds (repeatable)",
    )
    s.add_argument(
        "--metrics-offset",
        type=int,
        default=None,
        metavar="N",
        help="serve /metrics on metrics.worker_listen's port + N "
        "(ingestd-worker@N); without it, no endpoint",
    )
    s.add_argument(
        "--worker-id",
        default=None,
        metavar="ID",
        help="name in processing_jobs.worker_id (default HOST:PID; HOST-INSTANCE with --instance)",
    )
    s.add_argument(
        "--pool",
        default=None,
        metavar="NAME",
        help="serve the pool NAME of [[worker.pools]] (default: the default pool, every "
        "tenant no pool is dedicated to)",
    )
    s.add_argument(
        "--instance",
        default=None,
        metavar="I",
        help="the systemd instance (ingestd-worker@I): N is the default pool's Nth worker, "
        "NAME or NAME-N a pool's; sets the pool, the worker id and the metrics port",
    )
    s.set_defaults(func=cmd_worker)

    system.add_report_parsers(sub, common, jsonopt)

    jobs_cli.add_parser(sub, common, jsonopt)
    search_cli.add_parser(sub, common, jsonopt)
    audit_cli.add_parser(sub, common, jsonopt)
    retention_cli.add_parsers(sub, common, jsonopt)
    samples_cli.add_parser(sub)
    backup_cli.add_parsers(sub, common, jsonopt)  # issue 30: backup, restore

    # Issue 30, arrivals: `documents find` (below `documents`) and `trace`.
    find_cli.add_parser(_subcommands(sub.choices["documents"]), common, jsonopt)
    trace_cli.add_parser(sub, common, jsonopt)
    users_cli.add_parsers(sub, common, jsonopt)  # issue 31: people and capability sets
    invoices_cli.add_parsers(sub, common, jsonopt)  # issue 33: the accounting export

    return p


def _subcommands(parser: argparse.ArgumentParser) -> argparse._SubParsersAction:  # type: ignore[type-arg]
    """The sub-commands of ``parser`` (``documents``), to add one from another module."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action
    raise LookupError(f"{parser.prog} has no sub-commands")


def subparsers(
    parser: argparse.ArgumentParser, path: str = "ingestd"
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """``parser`` and every sub-command's parser below it, each with its command line
    ("ingestd jobs retry"); an alias's parser only once, under its name."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            seen: set[int] = set()
            for name, sub in action.choices.items():  # a name before its aliases
                if id(sub) not in seen:
                    seen.add(id(sub))
                    yield from subparsers(sub, f"{path} {name}")


def _report(exc: IngestdError) -> int:
    """The error on stderr: a JSON log line when logs are JSON (journald, a pipe: every
    line parses), else ``ingestd: message`` and the problems indented below it."""
    problems = [p for p in exc.problems if p != exc.message] if isinstance(exc, ConfigError) else []
    if log.json_output():
        fields: dict[str, Any] = {"problems": problems} if problems else {}
        log.get_logger().error(
            "cli.error", error=exc.message, exit_code=int(exc.exit_code), **fields
        )
    else:
        print(f"ingestd: {exc.message}", file=sys.stderr)
        for problem in problems:
            print(f"  {problem}", file=sys.stderr)
    return int(exc.exit_code)


def _internal(exc: Exception) -> int:
    """An exception nothing expected (a bug, or a failure no code path names): one line
    on stderr, a ``cli.error`` JSON line when logs are JSON, and ``ExitCode.internal``
    (15), never 1, which means "some files were refused". The traceback only with
    INGESTD_DEBUG=1 (OCRmyPDF's "other error")."""
    detail = " ".join(f"{type(exc).__name__}: {exc}".split())
    debug = os.environ.get("INGESTD_DEBUG") == "1"
    if debug:
        traceback.print_exception(exc, file=sys.stderr)
    hint = "" if debug else " (INGESTD_DEBUG=1 shows the traceback)"
    if log.json_output():
        log.get_logger().error(
            "cli.error", error=f"internal error: {detail}", exit_code=int(ExitCode.internal)
        )
    else:
        print(f"ingestd: internal error: {detail}{hint}", file=sys.stderr)
    return int(ExitCode.internal)


def _stdout_closed() -> int:
    """`ingestd jobs list | head -1`: the reader left. End quietly, as a tool killed by
    SIGPIPE would (the Python docs' recipe: stdout to /dev/null, so the interpreter's
    final flush of what is still buffered cannot raise again)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 128 + signal.SIGPIPE


def _as_service_user(args: argparse.Namespace) -> None:
    """Run as root: become the service user before anything is read or written
    (ingestd/ops/service_user.py). A command may prepare what only root can first
    (``before_switch``: the backup's target directory) or switch by itself (restore)."""
    from ingestd.config.load import default_config_path
    from ingestd.ops import service_user

    if args.config is not None:
        args.config = args.config.absolute()  # the cwd may be closed to the user
    if getattr(args, "switches_itself", False):
        return
    parts = [str(args.command)]
    parts += [v for k, v in sorted(vars(args).items()) if k.endswith("_cmd") and isinstance(v, str)]
    command = " ".join(parts)
    if command in service_user.STAY_ROOT or os.geteuid() != 0:
        return
    # check-config FILE...: the state directory of the first file checked.
    files = getattr(args, "files", None) or []
    config_path = args.config or (files[0].absolute() if files else default_config_path())
    to = service_user.target(service_user.peek_state_dir(config_path))
    if to is None:
        return
    prepare = getattr(args, "before_switch", None)
    if prepare is not None:
        prepare(args, to.user)
    service_user.become(to)


def main(argv: Sequence[str] | None = None) -> int:
    log.configure()
    args = build_parser().parse_args(argv)
    func: Handler = args.func
    try:
        _as_service_user(args)
        code = int(func(args))
        sys.stdout.flush()  # a closed pipe shows here, inside the try, not at exit
        return code
    except BrokenPipeError:
        return _stdout_closed()
    except IngestdError as exc:
        return _report(exc)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # the last resort: one line and exit 15, not a traceback and 1
        return _internal(exc)


if __name__ == "__main__":
    sys.exit(main())
