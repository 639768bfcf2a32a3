"""The capture store: exact reconstruction, storage proportional to new tokens, correct after restarts."""

from __future__ import annotations

import random
import threading

import pytest
from sqlalchemy import func
from sqlmodel import Session as DbSession
from sqlmodel import select

from polar_jobs.store import Blob, CaptureInput, CaptureStore, Completion, SessionStore, make_engine

pytestmark = pytest.mark.integration


@pytest.fixture
def engine(tmp_path):
    return make_engine(f"sqlite:///{tmp_path / 'store.db'}")


def _capture(session_id: str, prompt: list[int], sampled: list[int], raw: bytes) -> CaptureInput:
    return CaptureInput(session_id=session_id, provider="anthropic", path="/v1/messages", raw_request=raw,
                        chat_request={"messages": [{"role": "user", "content": raw.decode()}]},
                        upstream_response={"prompt_token_ids": prompt, "choices": [{"token_ids": sampled}]},
                        prompt_ids=prompt, response_ids=sampled, logprobs=[-0.5] * len(sampled),
                        prompt_tokens=len(prompt), completion_tokens=len(sampled))


def _prompt_tail_bytes(engine, session_id: str) -> int:
    with DbSession(engine) as db:
        return db.exec(select(func.sum(func.length(Completion.prompt_tail)))
                       .where(Completion.session_id == session_id)).one()


def test_append_only_session_stores_each_token_once_and_reconstructs_exactly(engine):
    rng = random.Random(7)
    session = SessionStore(engine).open_adhoc("key-append")
    store = CaptureStore(engine)
    prompt: list[int] = [rng.randrange(248000) for _ in range(3000)]
    prompts, raws = [], []
    raw = b'{"messages":[' + b"x" * 50_000
    for call in range(30):
        sampled = [rng.randrange(248000) for _ in range(rng.randint(5, 60))]
        prompts.append(list(prompt))
        raws.append(raw + b"]}")
        store.record(_capture(session.id, prompt, sampled, raw + b"]}"))
        prompt = prompt + sampled[:-1] + [rng.randrange(248000) for _ in range(rng.randint(10, 200))]
        raw = raw + b',{"turn":%d,"text":"%s"}' % (call, bytes(rng.choice(b"abcdefgh") for _ in range(300)))
    # each prompt token is stored once: 4 bytes per token of the longest prompt, not of all prompts
    assert _prompt_tail_bytes(engine, session.id) == 4 * len(prompts[-1])
    with DbSession(engine) as db:
        raw_blob_bytes = db.exec(select(func.sum(func.length(Blob.middle))).where(
            Blob.session_id == session.id, Blob.kind == "raw_request")).one()
    assert raw_blob_bytes < sum(len(r) for r in raws) / 10  # payloads are deltas too
    fresh = CaptureStore(engine).load_session(session.id)
    assert [c.prompt_ids for c in fresh] == prompts
    assert [c.raw_request for c in fresh] == raws
    assert all(c.upstream_response["prompt_token_ids"] == c.prompt_ids for c in fresh)


def test_interleaved_contexts_pick_the_longest_shared_prefix(engine):
    session = SessionStore(engine).open_adhoc("key-interleaved")
    store = CaptureStore(engine)
    main = list(range(1000, 3000))
    side = list(range(5000, 5600))
    ids = [store.record(_capture(session.id, main, [1, 2], b"m1")),
           store.record(_capture(session.id, side, [3], b"s1")),
           store.record(_capture(session.id, main + [7, 8, 9], [4], b"m2")),
           store.record(_capture(session.id, side + [9], [5], b"s2"))]
    with DbSession(engine) as db:
        rows = {r.id: r for r in db.exec(select(Completion).where(Completion.session_id == session.id))}
    assert rows[ids[2]].prompt_base_id == ids[0] and rows[ids[2]].prompt_prefix_len == len(main)
    assert rows[ids[3]].prompt_base_id == ids[1] and rows[ids[3]].prompt_prefix_len == len(side)
    assert _prompt_tail_bytes(engine, session.id) == 4 * (len(main) + len(side) + 4)


def test_a_second_process_continues_the_delta_chain_from_the_database(engine):
    session = SessionStore(engine).open_adhoc("key-restart")
    CaptureStore(engine).record(_capture(session.id, list(range(500)), [1], b'{"a":1}'))
    restarted = CaptureStore(engine)  # a proxy restart: empty caches
    restarted.record(_capture(session.id, list(range(520)), [2], b'{"a":1,"b":2}'))
    assert _prompt_tail_bytes(engine, session.id) == 4 * 520
    loaded = CaptureStore(engine).load_session(session.id)
    assert [len(c.prompt_ids) for c in loaded] == [500, 520]
    assert loaded[1].raw_request == b'{"a":1,"b":2}'


def test_concurrent_writers_in_one_session_lose_nothing(engine):
    session = SessionStore(engine).open_adhoc("key-concurrent")
    store = CaptureStore(engine)
    base = list(range(2000))
    errors: list[BaseException] = []

    def writer(worker: int) -> None:
        try:
            for call in range(10):
                prompt = base + [worker] * (call + 1)
                store.record(_capture(session.id, prompt, [worker, call], f"w{worker}c{call}".encode()))
        except BaseException as exc:  # noqa: BLE001 - surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    loaded = CaptureStore(engine).load_session(session.id)
    assert len(loaded) == 80
    for completion in loaded:
        worker, call = completion.response_ids
        assert completion.prompt_ids == base + [worker] * (call + 1)
        assert completion.raw_request == f"w{worker}c{call}".encode()
