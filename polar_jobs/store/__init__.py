"""Persistent state: SQLModel tables, the engine, sessions and captured completions."""

from polar_jobs.store.captures import CapturedCompletion, CaptureInput, CaptureStore
from polar_jobs.store.engine import make_engine
from polar_jobs.store.models import (
    ACCEPTS_MODEL_CALLS,
    ALLOWED_TRANSITIONS,
    TERMINAL_STATES,
    Blob,
    Completion,
    Session,
    SessionStatus,
)
from polar_jobs.store.sessions import InvalidTransition, SessionStore, new_api_key

__all__ = [
    "ACCEPTS_MODEL_CALLS", "ALLOWED_TRANSITIONS", "TERMINAL_STATES", "Blob", "CaptureInput", "CaptureStore",
    "CapturedCompletion", "Completion", "InvalidTransition", "Session", "SessionStatus", "SessionStore",
    "make_engine", "new_api_key",
]
