"""What every stage needs, built once per worker process (after the fork): stores, Redis, runtimes."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from functools import cached_property

import redis

from polar_jobs.runtimes import LocalRuntime
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

    def runtime(self, session_id: str) -> LocalRuntime:
        """The session's runtime; the same object shape from any process (its state lives on disk)."""
        return LocalRuntime(self.settings.sessions_dir(), session_id, keep_files=self.settings.keep_session_files)
