"""What every stage needs, built once per worker process (after the fork): stores, Redis, runtimes."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from functools import cached_property

import redis

from polar_jobs.runtimes import Runtime
from polar_jobs.settings import Settings
from polar_jobs.store import CaptureStore, make_engine
from polar_jobs.store.jobs import JobStore
from polar_jobs.trajectory.rerender import Decoder

log = logging.getLogger(__name__)


@dataclass
class Pipeline:
    settings: Settings = field(default_factory=Settings)

    @cached_property
    def engine(self):
        return make_engine(self.settings.resolved_database_url())

    @cached_property
    def jobs(self) -> JobStore:
        return JobStore(self.engine)

    @cached_property
    def captures(self) -> CaptureStore:
        return CaptureStore(self.engine)

    @cached_property
    def redis(self) -> redis.Redis:
        return redis.Redis.from_url(self.settings.broker_url or "redis://127.0.0.1:6379/0")

    @cached_property
    def decoder(self) -> Decoder | None:
        """What judges re-rendered history; without a working one, builds trust the template (logged)."""
        from polar_jobs.exporting import make_decoder

        decode = make_decoder(self.settings.trajectory_decoder, self.settings)
        if decode is None:
            return None
        try:
            decode([0])
        except Exception as exc:  # noqa: BLE001 - an unreachable upstream must not fail every postrun
            log.warning("trajectory decoder %r unavailable (%s); re-rendered history is trusted as is",
                        self.settings.trajectory_decoder, exc)
            return None
        return decode

    def runtime(self, session_id: str) -> Runtime:
        """The session's runtime, of the kind its task's ``RuntimeSpec`` names; the same object shape from
        any process (its state lives on disk, or in a container found by name)."""
        from polar_jobs.runtimes import make_runtime
        from polar_jobs.schemas import RuntimeSpec

        session = self.jobs.session(session_id)
        spec = RuntimeSpec()
        if session is not None and session.task_id:
            try:
                spec = self.jobs.request_of(session.task_id).runtime
            except KeyError:
                log.warning("session %s: its task %s is gone; using the local runtime", session_id, session.task_id)
        return make_runtime(spec, self.settings.sessions_dir(), session_id,
                            keep_files=self.settings.keep_session_files, proxy_url=self.settings.proxy_url())
