"""Serving WSGI apps: werkzeug's threaded server speaking HTTP/1.1 (keep-alive), in the foreground
(``serve_forever``) or in a background thread (demo, tests, benchmarks)."""

from __future__ import annotations

import threading

from werkzeug.serving import BaseWSGIServer, WSGIRequestHandler, make_server


class _KeepAliveHandler(WSGIRequestHandler):
    """HTTP/1.1: connections are reused and streamed bodies go out chunked."""

    protocol_version = "HTTP/1.1"


def make_wsgi_server(app, host: str = "127.0.0.1", port: int = 0) -> BaseWSGIServer:
    """A thread-per-connection server (upstream calls block for as long as a generation takes)."""
    return make_server(host, port, app, threaded=True, request_handler=_KeepAliveHandler)


def serve_forever(app, host: str, port: int) -> None:
    server = make_wsgi_server(app, host, port)
    try:
        server.serve_forever()
    finally:
        server.server_close()


class BackgroundServer:
    """``app`` on ``host`` and a port the OS picks (or ``port``), served from a daemon thread."""

    def __init__(self, app, host: str = "127.0.0.1", port: int = 0):
        self.server = make_wsgi_server(app, host, port)
        self.thread = threading.Thread(target=self.server.serve_forever, name="background-server", daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://{self.server.host}:{self.server.server_port}"

    def stop(self) -> None:
        self.server.shutdown()
        self.thread.join(timeout=5)
        self.server.server_close()

    def __enter__(self) -> "BackgroundServer":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
