"""Database engine: SQLite (WAL, busy timeout) on one machine, PostgreSQL on a farm."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlalchemy.exc import OperationalError
from sqlmodel import SQLModel, create_engine

from polar_jobs.store import models  # noqa: F401  (registers the tables)


def make_engine(url: str) -> Engine:
    """An engine with the tables created; SQLite gets WAL and a busy timeout for threads."""
    if url.startswith("sqlite"):
        path = url.split("///", 1)[-1]
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})
        event.listen(engine, "connect", _sqlite_pragmas)
    else:
        engine = create_engine(url, pool_pre_ping=True, pool_size=16, max_overflow=16)
    try:
        SQLModel.metadata.create_all(engine)
    except OperationalError as exc:  # another process created a table between the check and the CREATE
        if "already exists" not in str(exc):
            raise
        SQLModel.metadata.create_all(engine)
    return engine


def _sqlite_pragmas(dbapi_connection, _record) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()
