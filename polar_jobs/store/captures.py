"""Capture storage: writes one completion (and its blobs) in one transaction, reads sessions back.

Concurrency: one ``CaptureStore`` per process; a lock serializes the choice of delta bases and the
insert. Base choice is only an optimization (any committed row of the session is a valid base), so
several proxy processes writing the same database stay correct; the caches are per process and
rebuilt from the database on a miss.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import insert
from sqlalchemy.engine import Engine
from sqlmodel import Session as DbSession
from sqlmodel import col, func, select

from polar_jobs import jsonio
from polar_jobs.store import delta
from polar_jobs.store.models import Blob, Completion

BLOB_KINDS = ("raw_request", "chat_request", "upstream_response")
_COPIED_FIELDS = ("session_id", "provider", "path", "stream", "requested_model", "served_model", "status",
                  "http_status", "error", "finish_reason", "stop_reason", "prompt_tokens", "completion_tokens",
                  "trainable", "policy_version", "received_at", "upstream_started_at", "upstream_finished_at", "responded_at")
"""Columns stored and read back as they are (token data and payloads are encoded separately)."""
_INSERT_BLOB = insert(Blob.__table__)  # Core statements with bound parameters: compiled once, cached
_INSERT_COMPLETION = insert(Completion.__table__)
_TIPS_PER_SESSION = 4
_SESSIONS_CACHED = 128


@dataclass
class CaptureInput:
    """Everything the proxy knows about one call, written as one row."""

    session_id: str
    provider: str
    path: str
    raw_request: bytes
    chat_request: dict[str, Any] | None = None
    chat_request_json: bytes | None = None  # the exact bytes sent upstream, when the caller has them
    upstream_response: dict[str, Any] | None = None
    stream: bool = False
    requested_model: str | None = None
    served_model: str | None = None
    status: str = "ok"
    http_status: int = 200
    error: str | None = None
    prompt_ids: list[int] = field(default_factory=list)
    response_ids: list[int] = field(default_factory=list)
    logprobs: list[float] | None = None
    finish_reason: str | None = None
    stop_reason: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    trainable: bool = True
    policy_version: int | None = None
    received_at: float = 0.0
    upstream_started_at: float | None = None
    upstream_finished_at: float | None = None
    responded_at: float | None = None


@dataclass
class CapturedCompletion:
    """A stored completion with its token arrays and payloads reconstructed."""

    id: int
    session_id: str
    provider: str
    path: str
    stream: bool
    requested_model: str | None
    served_model: str | None
    status: str
    http_status: int
    error: str | None
    finish_reason: str | None
    stop_reason: str | None
    prompt_tokens: int
    completion_tokens: int
    trainable: bool
    policy_version: int | None
    prompt_ids: list[int]
    response_ids: list[int]
    logprobs: list[float] | None
    received_at: float
    upstream_started_at: float | None
    upstream_finished_at: float | None
    responded_at: float | None
    raw_request: bytes | None = None
    chat_request: dict[str, Any] | None = None
    upstream_response: dict[str, Any] | None = None

    def summary(self) -> dict[str, Any]:
        """The JSON-lines view printed by ``polar-jobs captures``."""
        return {
            "id": self.id,
            "session": self.session_id,
            "provider": self.provider,
            "status": self.status,
            "http_status": self.http_status,
            "error": self.error,
            "finish_reason": self.finish_reason,
            "prompt_token_ids": self.prompt_ids,
            "token_ids": self.response_ids,
            "logprobs": self.logprobs,
            "trainable": self.trainable,
            "received_at": self.received_at,
        }


class CaptureStore:
    """Writes and reads captured completions with delta-encoded prompts and payloads."""

    def __init__(self, engine: Engine):
        self.engine = engine
        self._lock = threading.Lock()
        self._tips: OrderedDict[str, list[tuple[int, bytes]]] = OrderedDict()
        self._last_blob: OrderedDict[tuple[str, str], tuple[int, bytes]] = OrderedDict()

    # -- writing -------------------------------------------------------------------------------
    def record(self, capture: CaptureInput) -> int:
        """Insert one completion and its blobs in one transaction; returns the completion id."""
        packed_prompt = delta.pack_ids(capture.prompt_ids)
        payloads = {
            "raw_request": capture.raw_request,
            "chat_request": capture.chat_request_json or _dump(capture.chat_request),
            "upstream_response": _dump(_without_prompt_ids(capture.upstream_response)),
        }
        payloads = {kind: data for kind, data in payloads.items() if data is not None}
        with self._lock:
            base_id, prefix_len = self._best_prompt_base(capture.session_id, packed_prompt)
            blob_ids: dict[str, int] = {}
            with self.engine.begin() as db:  # Core inserts: the ORM's unit of work costs milliseconds here
                for kind, data in payloads.items():
                    row = self._delta_blob(capture.session_id, kind, data)
                    blob_ids[kind] = db.execute(_INSERT_BLOB, row).inserted_primary_key[0]
                completion_id = db.execute(_INSERT_COMPLETION, dict(
                    {name: getattr(capture, name) for name in _COPIED_FIELDS},
                    prompt_base_id=base_id,
                    prompt_prefix_len=prefix_len,
                    prompt_tail=packed_prompt[prefix_len * 4 :],
                    response_ids=delta.pack_ids(capture.response_ids),
                    logprobs=None if capture.logprobs is None else delta.pack_floats(capture.logprobs),
                    raw_request_blob_id=blob_ids.get("raw_request"),
                    chat_request_blob_id=blob_ids.get("chat_request"),
                    upstream_response_blob_id=blob_ids.get("upstream_response"),
                )).inserted_primary_key[0]
            if packed_prompt:
                self._remember_tip(capture.session_id, completion_id, packed_prompt)
            for kind, data in payloads.items():
                self._remember_blob(capture.session_id, kind, blob_ids[kind], data)
        return completion_id

    def _best_prompt_base(self, session_id: str, packed_prompt: bytes) -> tuple[int | None, int]:
        if not packed_prompt:
            return None, 0
        best_id, best_len = None, 0
        for completion_id, tip in self._session_tips(session_id):
            shared = delta.common_token_prefix(tip, packed_prompt)
            if shared > best_len:
                best_id, best_len = completion_id, shared
        return best_id, best_len

    def _delta_blob(self, session_id: str, kind: str, data: bytes) -> dict[str, Any]:
        """Column values of a blob row: a delta against the session's previous blob of this kind."""
        last = self._latest_blob(session_id, kind)
        if last is None:
            return {"session_id": session_id, "kind": kind, "base_id": None, "prefix_len": 0, "suffix_len": 0,
                    "middle": delta.compress(data), "length": len(data)}
        base_id, base = last
        change = delta.diff_bytes(base, data)
        return {"session_id": session_id, "kind": kind, "base_id": base_id, "prefix_len": change.prefix,
                "suffix_len": change.suffix, "middle": delta.compress(change.middle), "length": len(data)}

    # -- caches (rebuilt from the database on a miss) ------------------------------------------
    def _session_tips(self, session_id: str) -> list[tuple[int, bytes]]:
        tips = self._tips.get(session_id)
        if tips is None:
            prompts = self._load_prompts(session_id)
            tips = [(cid, delta.pack_ids(ids)) for cid, ids in list(prompts.items())[-_TIPS_PER_SESSION:] if ids]
            self._tips[session_id] = tips
            self._evict(self._tips)
        self._tips.move_to_end(session_id)
        return tips

    def _remember_tip(self, session_id: str, completion_id: int, packed_prompt: bytes) -> None:
        tips = self._tips.setdefault(session_id, [])
        tips.append((completion_id, packed_prompt))
        del tips[:-_TIPS_PER_SESSION]
        self._evict(self._tips)

    def _latest_blob(self, session_id: str, kind: str) -> tuple[int, bytes] | None:
        key = (session_id, kind)
        if key not in self._last_blob:
            blobs = self._load_blobs(session_id, kind)
            if not blobs:
                return None
            last_id = max(blobs)
            self._last_blob[key] = (last_id, blobs[last_id])
            self._evict(self._last_blob, _SESSIONS_CACHED * len(BLOB_KINDS))
        return self._last_blob[key]

    def _remember_blob(self, session_id: str, kind: str, blob_id: int, data: bytes) -> None:
        self._last_blob[(session_id, kind)] = (blob_id, data)
        self._last_blob.move_to_end((session_id, kind))
        self._evict(self._last_blob, _SESSIONS_CACHED * len(BLOB_KINDS))

    @staticmethod
    def _evict(cache: OrderedDict, limit: int = _SESSIONS_CACHED) -> None:
        while len(cache) > limit:
            cache.popitem(last=False)

    # -- reading -------------------------------------------------------------------------------
    def _load_prompts(self, session_id: str) -> dict[int, list[int]]:
        with DbSession(self.engine) as db:
            rows = db.exec(
                select(Completion.id, Completion.prompt_base_id, Completion.prompt_prefix_len, Completion.prompt_tail)
                .where(Completion.session_id == session_id).order_by(col(Completion.id))
            ).all()
        packed: dict[int, bytes] = {}
        for cid, base_id, prefix_len, tail in rows:
            base = packed[base_id][: prefix_len * 4] if base_id is not None else b""
            packed[cid] = base + tail
        return {cid: delta.unpack_ids(data) for cid, data in packed.items()}

    def _load_blobs(self, session_id: str, kind: str) -> dict[int, bytes]:
        with DbSession(self.engine) as db:
            rows = db.exec(
                select(Blob).where(Blob.session_id == session_id, Blob.kind == kind).order_by(col(Blob.id))
            ).all()
        out: dict[int, bytes] = {}
        for blob in rows:
            middle = delta.decompress(blob.middle)
            if blob.base_id is None:
                out[blob.id] = middle
            else:
                out[blob.id] = delta.apply_bytes(out[blob.base_id], delta.ByteDelta(blob.prefix_len, blob.suffix_len, middle))
        return out

    def load_session(self, session_id: str, with_payloads: bool = True) -> list[CapturedCompletion]:
        """All completions of a session in call order, tokens (and payloads) reconstructed."""
        prompts = self._load_prompts(session_id)
        blobs = {kind: self._load_blobs(session_id, kind) for kind in BLOB_KINDS} if with_payloads else {}
        with DbSession(self.engine) as db:
            rows = db.exec(
                select(Completion).where(Completion.session_id == session_id).order_by(col(Completion.id))
            ).all()
        return [_reconstruct(row, prompts[row.id], blobs) for row in rows]

    def session_ids(self) -> list[str]:
        with DbSession(self.engine) as db:
            return list(db.exec(select(Completion.session_id).distinct().order_by(Completion.session_id)).all())

    def stored_bytes(self, session_id: str) -> dict[str, int]:
        """Bytes a session occupies: token data (prompt deltas, sampled ids, logprobs) and payload blobs."""
        with DbSession(self.engine) as db:
            tokens = db.exec(select(
                func.coalesce(func.sum(func.length(Completion.prompt_tail) + func.length(Completion.response_ids)
                                       + func.coalesce(func.length(Completion.logprobs), 0)), 0)
            ).where(Completion.session_id == session_id)).one()
            payloads = db.exec(select(func.coalesce(func.sum(func.length(Blob.middle)), 0))
                               .where(Blob.session_id == session_id)).one()
        return {"tokens": int(tokens), "payloads": int(payloads), "total": int(tokens) + int(payloads)}

    def count(self) -> int:
        with DbSession(self.engine) as db:
            return len(db.exec(select(Completion.id)).all())


def _reconstruct(row: Completion, prompt_ids: list[int], blobs: dict[str, dict[int, bytes]]) -> CapturedCompletion:
    def payload(kind: str, blob_id: int | None) -> bytes | None:
        if blob_id is None or kind not in blobs:
            return None
        return blobs[kind][blob_id]

    upstream = _load(payload("upstream_response", row.upstream_response_blob_id))
    if upstream is not None and prompt_ids:
        upstream["prompt_token_ids"] = prompt_ids
    return CapturedCompletion(
        id=row.id, **{name: getattr(row, name) for name in _COPIED_FIELDS},
        prompt_ids=prompt_ids, response_ids=delta.unpack_ids(row.response_ids),
        logprobs=None if row.logprobs is None else delta.unpack_floats(row.logprobs),
        raw_request=payload("raw_request", row.raw_request_blob_id),
        chat_request=_load(payload("chat_request", row.chat_request_blob_id)),
        upstream_response=upstream,
    )

def _dump(value: dict[str, Any] | None) -> bytes | None:
    return None if value is None else jsonio.dumps(value)


def _load(data: bytes | None) -> dict[str, Any] | None:
    return None if data is None else jsonio.loads(data)


def _without_prompt_ids(response: dict[str, Any] | None) -> dict[str, Any] | None:
    """The prompt ids are stored once, delta-encoded; the response blob leaves them out."""
    if response is None or "prompt_token_ids" not in response:
        return response
    return {k: v for k, v in response.items() if k != "prompt_token_ids"}
