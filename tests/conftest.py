"""Shared fixtures: a real sim upstream and a real proxy over HTTP, with a SQLite store per run."""

from __future__ import annotations

import uuid

import pytest

from polar_jobs.proxy.app import create_proxy_app
from polar_jobs.proxy.service import ProxyOptions, ProxyService
from polar_jobs.proxy.upstream import UpstreamClient
from polar_jobs.sim import create_sim_app
from polar_jobs.store import CaptureStore, SessionStatus, SessionStore, make_engine
from tests.servers import ServerThread, SimControl

SIM_MODEL = "polar-sim-qwen3"


@pytest.fixture(scope="session")
def sim():
    server = ServerThread(create_sim_app(model=SIM_MODEL, max_model_len=32768))
    yield SimControl(server.url)
    server.stop()


class ProxyHarness:
    """The proxy under test with direct access to its stores."""

    def __init__(self, service: ProxyService, server: ServerThread):
        self.service = service
        self.server = server
        self.url = server.url

    def new_session(self) -> tuple[str, str]:
        """A running session: (session id, API key)."""
        session = self.service.sessions.create(status=SessionStatus.RUNNING)
        return session.id, session.api_key

    def captures(self, session_id: str):
        return self.service.captures.load_session(session_id)


def build_proxy(tmp_path_factory, upstream_url: str, **options) -> tuple[ProxyService, ServerThread]:
    db = tmp_path_factory.mktemp("db") / f"{uuid.uuid4().hex}.db"
    engine = make_engine(f"sqlite:///{db}")
    service = ProxyService(SessionStore(engine), CaptureStore(engine),
                           UpstreamClient(upstream_url, read_timeout=30), ProxyOptions(**options))
    return service, ServerThread(create_proxy_app(service=service))


@pytest.fixture(scope="session")
def proxy(sim, tmp_path_factory):
    service, server = build_proxy(tmp_path_factory, sim.url)
    yield ProxyHarness(service, server)
    server.stop()


@pytest.fixture
def marker() -> str:
    """A unique word a test puts in its prompt so its sim rules match only its own calls."""
    return "m" + uuid.uuid4().hex[:12]
