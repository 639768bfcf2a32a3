"""Tasks, their sessions and their groups in the database: the source of truth for the pipeline.

Every state change is a conditional UPDATE (``WHERE status IN (allowed sources)``), so a redelivered
Celery message cannot apply it twice. The group barrier is a counter on the task: each session that
reaches a terminal state adds one, exactly once, and whoever brings it to ``num_samples`` finalizes.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, insert, update
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session as DbSession
from sqlmodel import col, select

from polar_jobs import jsonio
from polar_jobs.schemas import TaskRequest
from polar_jobs.store.models import (
    ALLOWED_TRANSITIONS, TERMINAL_STATES, GroupCursor, Session, SessionStatus, StoredTrajectory, Task,
)
from polar_jobs.store.sessions import new_api_key

_NOT_TERMINAL = [state.value for state in SessionStatus if state not in TERMINAL_STATES]
_GROUP_GRACE_S = 60.0  # after the session budget, how long before the sweeper closes a group's stragglers


class IdempotencyConflict(ValueError):
    """An Idempotency-Key reused with a different request."""


@dataclass(frozen=True)
class Finished:
    """A session reached a terminal state for the first time: its task and whether the group is complete."""

    task_id: str | None
    group_complete: bool


def sources_of(target: SessionStatus) -> list[str]:
    """Every state the machine allows to move to ``target``."""
    return [source.value for source, targets in ALLOWED_TRANSITIONS.items() if target in targets]


class JobStore:
    def __init__(self, engine: Engine):
        self.engine = engine

    # -- intake --------------------------------------------------------------------------------
    def create_task(self, request: TaskRequest, idempotency_key: str | None = None) -> tuple[Task, bool]:
        """The task and its pending sessions, in one transaction; (task, created). Same key → same task."""
        request_json = request.model_dump_json()
        fingerprint = hashlib.sha256(request_json.encode()).hexdigest()[:16]
        key = f"{idempotency_key}#{fingerprint}" if idempotency_key else None
        if idempotency_key:
            existing = self._task_by_key(idempotency_key)
            if existing is not None:
                return self._same_request(existing, key), False
        now = time.time()
        task = Task(id=uuid.uuid4().hex, idempotency_key=key, request_json=request_json,
                    num_samples=request.num_samples, mode=request.mode, created_at=now,
                    deadline_at=now + request.timeout_seconds + _GROUP_GRACE_S)
        try:
            with DbSession(self.engine, expire_on_commit=False) as db:
                db.add(task)
                for index in range(request.num_samples):
                    db.add(Session(id=uuid.uuid4().hex, api_key=new_api_key(), task_id=task.id, sample_index=index,
                                   priority=request.priority, status=SessionStatus.PENDING.value, created_at=now))
                db.commit()
        except IntegrityError:  # the same key raced in from another request: that one won
            existing = self._task_by_key(idempotency_key or "")
            if existing is None:
                raise
            return self._same_request(existing, key), False
        return task, True

    def _task_by_key(self, idempotency_key: str) -> Task | None:
        with DbSession(self.engine, expire_on_commit=False) as db:
            return db.exec(select(Task).where(col(Task.idempotency_key).startswith(f"{idempotency_key}#"))).first()

    @staticmethod
    def _same_request(task: Task, key: str | None) -> Task:
        if task.idempotency_key != key:
            raise IdempotencyConflict("this Idempotency-Key was used for a different request")
        return task

    # -- reads ---------------------------------------------------------------------------------
    def task(self, task_id: str) -> Task | None:
        with DbSession(self.engine, expire_on_commit=False) as db:
            return db.get(Task, task_id)

    def session(self, session_id: str) -> Session | None:
        with DbSession(self.engine, expire_on_commit=False) as db:
            return db.get(Session, session_id)

    def sessions_of(self, task_id: str) -> list[Session]:
        with DbSession(self.engine, expire_on_commit=False) as db:
            return list(db.exec(select(Session).where(Session.task_id == task_id).order_by(Session.sample_index)))

    def request_of(self, task_id: str) -> TaskRequest:
        task = self.task(task_id)
        if task is None:
            raise KeyError(task_id)
        return TaskRequest.model_validate_json(task.request_json)

    def status_counts(self) -> dict[str, int]:
        with DbSession(self.engine) as db:
            rows = db.exec(select(Session.status, func.count()).where(Session.kind == "task").group_by(Session.status))
            return {status: count for status, count in rows}

    # -- admission: the bounded READY buffer ---------------------------------------------------
    def claim_for_init(self, cap: int) -> list[str]:
        """Move pending sessions to ``init`` while fewer than ``cap`` are in init or ready.

        Callers serialize this (a Redis lock): the count and the claims must not interleave.
        """
        with DbSession(self.engine) as db:
            busy = db.exec(select(func.count()).select_from(Session).where(
                col(Session.status).in_([SessionStatus.INIT.value, SessionStatus.READY.value]))).one()
            room = cap - busy
            if room <= 0:
                return []
            candidates = db.exec(select(Session.id).where(Session.status == SessionStatus.PENDING.value)
                                 .order_by(col(Session.priority).desc(), Session.created_at, Session.sample_index)
                                 .limit(room)).all()
        return [session_id for session_id in candidates
                if self.transition(session_id, SessionStatus.PENDING, SessionStatus.INIT)]

    # -- transitions ---------------------------------------------------------------------------
    def transition(self, session_id: str, source: SessionStatus | list[SessionStatus], target: SessionStatus,
                   **values: Any) -> bool:
        """``source → target`` if the session is still in (one of) ``source``; False otherwise."""
        sources = [source] if isinstance(source, SessionStatus) else source
        allowed = set(sources_of(target))
        if not {s.value for s in sources} <= allowed:
            raise ValueError(f"{[s.value for s in sources]} → {target.value} is not an allowed transition")
        with self.engine.begin() as db:
            result = db.execute(update(Session).where(Session.id == session_id,
                                                      col(Session.status).in_([s.value for s in sources]))
                                .values(status=target.value, updated_at=time.time(), **values))
            return result.rowcount == 1

    def set_values(self, session_id: str, **values: Any) -> None:
        with self.engine.begin() as db:
            db.execute(update(Session).where(Session.id == session_id).values(updated_at=time.time(), **values))

    def finish(self, session_id: str, final: SessionStatus, *, reward: float | None = None,
               result: dict[str, Any] | None = None) -> Finished | None:
        """The session's terminal state, once; counts it into its group. None if it was already terminal."""
        if final not in TERMINAL_STATES:
            raise ValueError(f"{final.value} is not a terminal state")
        with self.engine.begin() as db:
            changed = db.execute(update(Session).where(Session.id == session_id,
                                                       col(Session.status).in_(sources_of(final)))
                                 .values(status=final.value, updated_at=time.time(), reward=reward,
                                         result_json=None if result is None else jsonio.dumps(result).decode()))
            if changed.rowcount != 1:
                return None
            task_id = db.execute(select(Session.task_id).where(Session.id == session_id)).scalar_one()
            if task_id is None:
                return Finished(None, False)
            counted = db.execute(update(Task).where(Task.id == task_id).values(n_done=Task.n_done + 1)
                                 .returning(Task.n_done, Task.num_samples)).one()
            return Finished(task_id, counted[0] >= counted[1])

    # -- groups --------------------------------------------------------------------------------
    def finalize(self, task_id: str, group: dict[str, Any]) -> int | None:
        """Mark the group finished (once) and give it the next cursor; None if it already was."""
        with self.engine.begin() as db:
            changed = db.execute(update(Task).where(Task.id == task_id, Task.status == "open")
                                 .values(status="finalized", finalized_at=time.time(),
                                         group_json=jsonio.dumps(group).decode(), callback_status="pending"))
            if changed.rowcount != 1:
                return None
            return db.execute(insert(GroupCursor).values(task_id=task_id, finalized_at=time.time())
                              ).inserted_primary_key[0]

    def groups_after(self, cursor: int, limit: int) -> list[tuple[int, Task]]:
        """Finished groups with a cursor above ``cursor``, oldest first."""
        with DbSession(self.engine, expire_on_commit=False) as db:
            rows = db.exec(select(GroupCursor.cursor, Task).join(Task, Task.id == GroupCursor.task_id)
                           .where(GroupCursor.cursor > cursor).order_by(GroupCursor.cursor).limit(limit)).all()
            return [(row[0], row[1]) for row in rows]

    def set_callback_status(self, task_id: str, status: str) -> None:
        with self.engine.begin() as db:
            db.execute(update(Task).where(Task.id == task_id).values(callback_status=status))

    # -- cancellation and the sweeper ----------------------------------------------------------
    def request_cancel(self, task_id: str) -> list[str]:
        """Pending sessions end cancelled now (returns them); started ones are asked to stop."""
        with self.engine.begin() as db:
            db.execute(update(Task).where(Task.id == task_id).values(cancelled=True))
            db.execute(update(Session).where(Session.task_id == task_id,
                                             col(Session.status).in_(_NOT_TERMINAL))
                       .values(cancel_requested=True))
            pending = db.execute(select(Session.id).where(Session.task_id == task_id,
                                                          Session.status == SessionStatus.PENDING.value)).scalars().all()
        return list(pending)

    def overdue(self, now: float | None = None) -> list[tuple[str, str]]:
        """(session id, status) of unfinished sessions past their budget or their group's deadline."""
        now = now or time.time()
        with DbSession(self.engine) as db:
            rows = db.exec(select(Session.id, Session.status).join(Task, Task.id == Session.task_id)
                           .where(col(Session.status).in_(_NOT_TERMINAL),
                                  (col(Session.deadline_at) < now) | (Task.deadline_at < now)))
            return [(row[0], row[1]) for row in rows]

    def open_tasks_complete(self) -> list[str]:
        """Tasks whose every session is terminal but whose group never finalized (a lost finalize message)."""
        with DbSession(self.engine) as db:
            return list(db.exec(select(Task.id).where(Task.status == "open", Task.n_done >= Task.num_samples)))

    # -- trajectories --------------------------------------------------------------------------
    def store_trajectory(self, session_id: str, builder: str, status: str, payload: bytes) -> None:
        with DbSession(self.engine) as db:
            db.merge(StoredTrajectory(session_id=session_id, builder=builder, status=status, payload=payload))
            db.commit()

    def trajectory_payload(self, session_id: str) -> StoredTrajectory | None:
        with DbSession(self.engine, expire_on_commit=False) as db:
            return db.get(StoredTrajectory, session_id)
