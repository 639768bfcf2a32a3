"""Session lookup by API key, ad-hoc sessions for open capture, and conditional state transitions."""

from __future__ import annotations

import secrets
import time
import uuid

from sqlalchemy import bindparam, update
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session as DbSession
from sqlmodel import select

from polar_jobs.store.models import ALLOWED_TRANSITIONS, Session, SessionStatus


_STATUS_BY_KEY = select(Session.id, Session.status, Session.policy_version).where(Session.api_key == bindparam("key"))


class InvalidTransition(ValueError):
    """A transition the state machine does not allow."""


class SessionStore:
    """Sessions in the database; the database, not any cache, is the source of truth."""

    def __init__(self, engine: Engine):
        self.engine = engine

    def create(self, *, api_key: str | None = None, kind: str = "task", task_id: str | None = None,
               status: SessionStatus = SessionStatus.PENDING) -> Session:
        row = Session(id=uuid.uuid4().hex, api_key=api_key or new_api_key(), kind=kind, task_id=task_id,
                      status=status.value)
        with DbSession(self.engine, expire_on_commit=False) as db:
            db.add(row)
            db.commit()
        return row

    def by_key(self, api_key: str) -> Session | None:
        with DbSession(self.engine, expire_on_commit=False) as db:
            return db.exec(select(Session).where(Session.api_key == api_key)).first()

    def status_by_key(self, api_key: str) -> tuple[str, str, int | None] | None:
        """(session id, status, policy version) for a key: the proxy's per-call lookup, without the ORM."""
        with self.engine.connect() as db:
            row = db.execute(_STATUS_BY_KEY, {"key": api_key}).first()
        return None if row is None else (row[0], row[1], row[2])

    def set_policy_version(self, session_id: str, version: int) -> None:
        """Calls served from now on are tagged with ``version`` (a trainer pushed new weights)."""
        with DbSession(self.engine) as db:
            db.exec(update(Session).where(Session.id == session_id).values(policy_version=version,
                                                                           updated_at=time.time()))
            db.commit()

    def get(self, session_id: str) -> Session | None:
        with DbSession(self.engine, expire_on_commit=False) as db:
            return db.get(Session, session_id)

    def open_adhoc(self, api_key: str) -> Session:
        """The ad-hoc session for this key, created on first use (race-safe across threads)."""
        existing = self.by_key(api_key)
        if existing is not None:
            return existing
        try:
            return self.create(api_key=api_key, kind="adhoc", status=SessionStatus.RUNNING)
        except IntegrityError:
            found = self.by_key(api_key)
            if found is None:
                raise
            return found

    def transition(self, session_id: str, source: SessionStatus, target: SessionStatus) -> bool:
        """Move ``source → target`` if the session is still in ``source``; False if it was not."""
        if target not in ALLOWED_TRANSITIONS.get(source, frozenset()):
            raise InvalidTransition(f"{source.value} → {target.value} is not an allowed session transition")
        with DbSession(self.engine) as db:
            result = db.exec(
                update(Session)
                .where(Session.id == session_id, Session.status == source.value)
                .values(status=target.value, updated_at=time.time())
            )
            db.commit()
            return result.rowcount == 1


def new_api_key() -> str:
    """A fresh session secret (what a harness sends as its API key)."""
    return "pj-" + secrets.token_urlsafe(24)
