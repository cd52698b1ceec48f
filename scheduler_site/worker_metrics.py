"""A worker host's own /metrics, for hosts that run Celery workers and no web process:
the Celery main process serves the figures of its pool children (their files in
`PROMETHEUS_MULTIPROC_DIR`) on `WORKER_METRICS_BIND` (`host:port`), behind METRICS_TOKEN
when it is set. The leader's figures and the facts of PostgreSQL and Redis are the web's
/metrics, not this one (ADR 0013)."""

from __future__ import annotations

import logging
import threading
from wsgiref.simple_server import WSGIServer, make_server

from django.conf import settings
from prometheus_client import make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer, _SilentHandler

from core.logs import log_event

from .metrics.exposition import authorised, host_registry

log = logging.getLogger("scheduler_site.worker_metrics")


def metrics_app(registry=None):
    """The WSGI app: GET /metrics only, the token checked first."""
    serve_metrics = make_wsgi_app(registry or host_registry())

    def app(environ, start_response):
        if environ.get("PATH_INFO") != "/metrics":
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"not found\n"]
        if not authorised(environ.get("HTTP_AUTHORIZATION")):
            start_response(
                "401 Unauthorized",
                [("Content-Type", "text/plain"), ("WWW-Authenticate", 'Bearer realm="metrics"')],
            )
            return [b"a valid metrics token is required\n"]
        return serve_metrics(environ, start_response)

    return app


def serve(bind: str) -> WSGIServer:
    """Serve in a daemon thread; returns the server (its port, for `:0`)."""
    host, _, port = bind.rpartition(":")
    server = make_server(
        host or "0.0.0.0", int(port), metrics_app(), ThreadingWSGIServer, _SilentHandler
    )
    threading.Thread(target=server.serve_forever, name="worker-metrics", daemon=True).start()
    log_event(
        log,
        "worker.metrics_serving",
        "serving this host's worker metrics on %s:%s/metrics",
        host or "0.0.0.0",
        server.server_port,
        bind=bind,
    )
    return server


def serve_from_settings() -> WSGIServer | None:
    return serve(settings.WORKER_METRICS_BIND) if settings.WORKER_METRICS_BIND else None
