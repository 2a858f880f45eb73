"""`ingestd web`: the console on uvicorn, one process, its database pool opened here.
SIGTERM and SIGINT stop it after the requests in flight (uvicorn's own handlers)."""

from __future__ import annotations

import ssl

import uvicorn

from ingestd import log
from ingestd.archive.backends import make_archive
from ingestd.config.settings import Config, parse_listen
from ingestd.daemon.wiring import open_database
from ingestd.ops.metrics_server import MetricsEndpoint
from ingestd.web.app import make_app


def serve(config: Config) -> int:
    """Serve until stopped; the exit code."""
    host, port = parse_listen(config.web.listen)
    web = config.web
    endpoint = _metrics_endpoint(config)
    with open_database(config, name="ingestd-web") as db:
        app = make_app(config, db, make_archive(config))
        settings = uvicorn.Config(
            app,
            host=host,
            port=port,
            log_config=None,  # our structlog lines, not uvicorn's own format
            access_log=False,
            proxy_headers=web.behind_proxy,
            forwarded_allow_ips="127.0.0.1,::1" if web.behind_proxy else "",
            server_header=False,
            ssl_certfile=str(web.tls_certificate) if web.tls_certificate else None,
            ssl_keyfile=str(web.tls_key) if web.tls_key else None,
            ssl_version=ssl.PROTOCOL_TLS_SERVER,
            timeout_graceful_shutdown=20,
        )
        server = uvicorn.Server(settings)
        log.get_logger().info("web.ready", listen=web.listen, https=web.tls_certificate is not None)
        server.run()
    if endpoint is not None:
        endpoint.close()
    log.get_logger().info("web.stopped")
    return 0


def _metrics_endpoint(config: Config) -> MetricsEndpoint | None:
    """/metrics on metrics.web_listen (apart from the console's port, which may face
    users); a taken port is logged, not fatal: serving people matters more."""
    if not config.metrics.enabled:
        return None
    try:
        endpoint = MetricsEndpoint(config.metrics.web_listen)
    except OSError as exc:
        log.get_logger().error(
            "web.metrics_failed", listen=config.metrics.web_listen, error=str(exc)
        )
        return None
    host, port = endpoint.address
    log.get_logger().info("web.metrics", listen=f"{host}:{port}")
    return endpoint
