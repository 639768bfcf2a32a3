"""SQLModel tables: sessions, captured completions and the delta-encoded blobs behind them."""

from __future__ import annotations

import time
from enum import StrEnum

from sqlmodel import Field, SQLModel


class SessionStatus(StrEnum):
    PENDING = "pending"
    INIT = "init"
    READY = "ready"
    RUNNING = "running"
    POSTRUN = "postrun"
    DONE = "done"
    FAILED = "failed"
    TIMEOUT = "timeout"
    CANCELLED = "cancelled"


TERMINAL_STATES = frozenset(
    {SessionStatus.DONE, SessionStatus.FAILED, SessionStatus.TIMEOUT, SessionStatus.CANCELLED}
)

ALLOWED_TRANSITIONS: dict[SessionStatus, frozenset[SessionStatus]] = {
    SessionStatus.PENDING: frozenset({SessionStatus.INIT, SessionStatus.CANCELLED, SessionStatus.TIMEOUT}),
    SessionStatus.INIT: frozenset({SessionStatus.READY, SessionStatus.POSTRUN, SessionStatus.FAILED,
                                   SessionStatus.CANCELLED, SessionStatus.TIMEOUT}),
    SessionStatus.READY: frozenset({SessionStatus.RUNNING, SessionStatus.POSTRUN, SessionStatus.CANCELLED,
                                    SessionStatus.TIMEOUT}),
    SessionStatus.RUNNING: frozenset({SessionStatus.POSTRUN}),
    SessionStatus.POSTRUN: frozenset({SessionStatus.DONE, SessionStatus.FAILED, SessionStatus.TIMEOUT,
                                      SessionStatus.CANCELLED}),
}
"""The session state machine: every transition the store will apply (a conditional update)."""

ACCEPTS_MODEL_CALLS = frozenset(
    {SessionStatus.PENDING, SessionStatus.INIT, SessionStatus.READY, SessionStatus.RUNNING}
)
"""States in which the proxy serves a session's calls; later ones answer 403 (session closed)."""


class Session(SQLModel, table=True):
    """One harness run; its API key is the secret that binds proxy calls to it."""

    id: str = Field(primary_key=True)
    api_key: str = Field(index=True, unique=True)
    kind: str = "task"  # "task" (created by intake) or "adhoc" (opened by open capture mode)
    task_id: str | None = Field(default=None, index=True)
    status: str = Field(default=SessionStatus.RUNNING.value, index=True)
    policy_version: int | None = None
    sample_index: int = 0
    priority: int = Field(default=0, index=True)
    deadline_at: float | None = None  # the session's whole budget, set when init starts
    cancel_requested: bool = False
    reward: float | None = None
    result_json: str | None = None  # harness outcome, evaluation, trajectory summary (JSON)
    created_at: float = Field(default_factory=time.time, index=True)
    updated_at: float = Field(default_factory=time.time)


class Task(SQLModel, table=True):
    """One submitted prompt: ``num_samples`` sessions whose results form one GRPO group."""

    id: str = Field(primary_key=True)
    idempotency_key: str | None = Field(default=None, index=True, unique=True)
    request_json: str
    num_samples: int
    mode: str = "rl"
    status: str = Field(default="open", index=True)  # open | finalized
    cancelled: bool = False
    n_done: int = 0  # sessions that reached a terminal state: the group's barrier
    created_at: float = Field(default_factory=time.time)
    deadline_at: float = 0.0  # past this, the sweeper closes sessions that never finished
    finalized_at: float | None = None
    group_json: str | None = None
    callback_status: str | None = None  # pending | delivered | failed


class GroupCursor(SQLModel, table=True):
    """Finished groups in the order they finished: the stable cursor trainers poll with."""

    cursor: int | None = Field(default=None, primary_key=True)
    task_id: str = Field(unique=True, index=True)
    finalized_at: float = Field(default_factory=time.time)


class StoredTrajectory(SQLModel, table=True):
    """A session's built trajectory (zlib-compressed JSON), written once in postrun."""

    session_id: str = Field(primary_key=True)
    builder: str
    status: str
    payload: bytes


class Blob(SQLModel, table=True):
    """A byte string stored as a delta against an earlier blob of the same session and kind."""

    id: int | None = Field(default=None, primary_key=True)
    session_id: str = Field(index=True)
    kind: str  # raw_request | chat_request | upstream_response
    base_id: int | None = None
    prefix_len: int = 0
    suffix_len: int = 0
    middle: bytes = b""  # zlib-compressed
    length: int = 0


class Completion(SQLModel, table=True):
    """One model call as captured by the proxy; token data is packed binary (see store.delta)."""

    id: int | None = Field(default=None, primary_key=True)
    session_id: str = Field(index=True, foreign_key="session.id")
    provider: str
    path: str
    stream: bool = False
    requested_model: str | None = None
    served_model: str | None = None
    status: str = "ok"  # ok | failed
    http_status: int = 200
    error: str | None = None
    finish_reason: str | None = None
    stop_reason: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    prompt_base_id: int | None = None
    prompt_prefix_len: int = 0
    prompt_tail: bytes = b""
    response_ids: bytes = b""
    logprobs: bytes | None = None
    trainable: bool = True
    policy_version: int | None = None  # the session's policy version when the call was served
    raw_request_blob_id: int | None = None
    chat_request_blob_id: int | None = None
    upstream_response_blob_id: int | None = None
    received_at: float = Field(default_factory=time.time, index=True)
    upstream_started_at: float | None = None
    upstream_finished_at: float | None = None
    responded_at: float | None = None
