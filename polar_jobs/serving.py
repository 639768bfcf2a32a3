"""WSGI apps served in a background thread on a loopback port (demo, tests, benchmarks)."""

from __future__ import annotations

import threading

from werkzeug.serving import make_server


class BackgroundServer:
    """A werkzeug threaded server for ``app`` on ``host`` and a port the OS picks (or ``port``)."""

    def __init__(self, app, host: str = "127.0.0.1", port: int = 0):
        self.server = make_server(host, port, app, threaded=True)
        self.thread = threading.Thread(target=self.server.serve_forever, name=f"serve-{app}", daemon=True)
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
