"""JobStore on a real SQLite file: the session state machine, admission, the group barrier, cursors."""

from __future__ import annotations

import time

import pytest
from sqlmodel import Session as DbSession
from sqlmodel import func, select

from polar_jobs.schemas import TaskRequest
from polar_jobs.store import make_engine
from polar_jobs.store.jobs import IdempotencyConflict, JobStore
from polar_jobs.store.models import Session, SessionStatus as S, Task

pytestmark = pytest.mark.unit


@pytest.fixture
def jobs(tmp_path) -> JobStore:
    return JobStore(make_engine(f"sqlite:///{tmp_path / 'jobs.db'}"))


def request(n: int = 3, instruction: str = "fix the bug", **extra) -> TaskRequest:
    return TaskRequest.model_validate({"instruction": instruction, "num_samples": n,
                                       "agent": {"harness": "shell", "command": "true"}, **extra})


def new_task(jobs: JobStore, n: int = 3, **extra) -> tuple[Task, list[str]]:
    task, created = jobs.create_task(request(n, **extra))
    assert created
    return task, [s.id for s in jobs.sessions_of(task.id)]


def walk_to(jobs: JobStore, session_id: str, target: S) -> None:
    """Move a pending session along the happy path up to ``target``."""
    path = [S.INIT, S.READY, S.RUNNING, S.POSTRUN]
    current = S.PENDING
    for step in path:
        assert jobs.transition(session_id, current, step)
        current = step
        if step == target:
            return
    raise AssertionError(f"{target} is not on the happy path")


def count_sessions(jobs: JobStore) -> int:
    with DbSession(jobs.engine) as db:
        return db.exec(select(func.count()).select_from(Session)).one()


# -- creation -------------------------------------------------------------------------------------

def test_create_task_makes_pending_sessions_with_indexes(jobs):
    task, ids = new_task(jobs, 3, priority=5)
    sessions = jobs.sessions_of(task.id)
    assert [s.sample_index for s in sessions] == [0, 1, 2]
    assert {s.status for s in sessions} == {"pending"}
    assert {s.priority for s in sessions} == {5}
    assert len({s.api_key for s in sessions}) == 3
    assert task.status == "open" and task.n_done == 0 and task.num_samples == 3
    assert task.deadline_at > task.created_at + 3600  # the whole budget plus a grace for the group
    assert jobs.request_of(task.id).instruction == "fix the bug"
    assert jobs.status_counts() == {"pending": 3}


# -- the state machine ----------------------------------------------------------------------------

def test_happy_path_transitions_apply(jobs):
    _, (sid, *_) = new_task(jobs, 1)
    walk_to(jobs, sid, S.POSTRUN)
    assert jobs.session(sid).status == "postrun"
    finished = jobs.finish(sid, S.DONE, reward=1.0, result={"ok": True})
    assert finished is not None and finished.group_complete
    session = jobs.session(sid)
    assert session.status == "done" and session.reward == 1.0 and '"ok":true' in session.result_json


@pytest.mark.parametrize("source,target", [
    (S.PENDING, S.RUNNING),  # must go through init and ready
    (S.PENDING, S.READY),
    (S.RUNNING, S.DONE),  # a running session always goes through postrun
    (S.RUNNING, S.CANCELLED),
    (S.INIT, S.RUNNING),
    (S.DONE, S.POSTRUN),  # terminal states are final
    (S.POSTRUN, S.RUNNING),
])
def test_forbidden_transitions_are_refused(jobs, source, target):
    _, (sid, *_) = new_task(jobs, 1)
    with pytest.raises(ValueError):
        jobs.transition(sid, source, target)
    assert jobs.session(sid).status == "pending"


def test_transition_from_a_state_the_session_is_not_in_is_a_no_op(jobs):
    _, (sid, *_) = new_task(jobs, 1)
    assert jobs.transition(sid, S.PENDING, S.INIT)
    assert not jobs.transition(sid, S.READY, S.RUNNING)  # allowed edge, but the session is in init
    assert jobs.session(sid).status == "init"
    assert not jobs.transition("no-such-session", S.PENDING, S.INIT)


def test_redelivered_transition_applies_once(jobs):
    _, (sid, *_) = new_task(jobs, 1)
    walk_to(jobs, sid, S.READY)
    assert jobs.transition(sid, S.READY, S.RUNNING)
    before = jobs.session(sid).updated_at
    assert not jobs.transition(sid, S.READY, S.RUNNING)  # the same message delivered again
    assert not jobs.transition(sid, [S.READY], S.RUNNING, result_json="overwritten")
    session = jobs.session(sid)
    assert session.status == "running" and session.updated_at == before and session.result_json is None


def test_transition_from_several_sources(jobs):
    _, (a, b) = new_task(jobs, 2)
    walk_to(jobs, a, S.INIT)
    walk_to(jobs, b, S.READY)
    for sid in (a, b):
        assert jobs.transition(sid, [S.INIT, S.READY], S.POSTRUN)
        assert jobs.session(sid).status == "postrun"


def test_finish_refuses_a_non_terminal_target(jobs):
    _, (sid, *_) = new_task(jobs, 1)
    with pytest.raises(ValueError):
        jobs.finish(sid, S.RUNNING)


def test_finish_from_running_is_not_allowed(jobs):
    task, (sid, *_) = new_task(jobs, 1)
    walk_to(jobs, sid, S.RUNNING)
    assert jobs.finish(sid, S.DONE, reward=1.0) is None  # done only from postrun
    assert jobs.session(sid).status == "running"
    assert jobs.task(task.id).n_done == 0


# -- the group barrier ----------------------------------------------------------------------------

def test_finish_counts_each_session_once_and_reports_completion_once(jobs):
    task, ids = new_task(jobs, 3)
    walk_to(jobs, ids[0], S.POSTRUN)
    walk_to(jobs, ids[1], S.INIT)
    first = jobs.finish(ids[0], S.DONE, reward=1.0)
    assert first.task_id == task.id and not first.group_complete
    assert jobs.finish(ids[0], S.FAILED) is None  # redelivered postrun: already terminal
    assert jobs.finish(ids[0], S.DONE, reward=0.0) is None
    assert jobs.session(ids[0]).reward == 1.0 and jobs.session(ids[0]).status == "done"
    second = jobs.finish(ids[1], S.FAILED, result={"error": "init broke"})
    assert not second.group_complete
    assert jobs.task(task.id).n_done == 2
    third = jobs.finish(ids[2], S.CANCELLED)  # pending → cancelled
    assert third.group_complete and third.task_id == task.id
    assert jobs.finish(ids[2], S.CANCELLED) is None
    assert jobs.finish(ids[2], S.TIMEOUT) is None
    assert jobs.task(task.id).n_done == 3
    assert jobs.open_tasks_complete() == [task.id]


def test_finish_of_a_session_without_task(jobs):
    from polar_jobs.store.sessions import new_api_key

    with DbSession(jobs.engine) as db:
        db.add(Session(id="adhoc", api_key=new_api_key(), kind="adhoc", status=S.POSTRUN.value))
        db.commit()
    finished = jobs.finish("adhoc", S.DONE)
    assert finished is not None and finished.task_id is None and not finished.group_complete


# -- admission ------------------------------------------------------------------------------------

def test_claim_for_init_respects_the_cap(jobs):
    _, ids = new_task(jobs, 5)
    claimed = jobs.claim_for_init(2)
    assert len(claimed) == 2
    assert jobs.claim_for_init(2) == []  # init + ready already at the cap
    assert jobs.transition(claimed[0], S.INIT, S.READY)
    assert jobs.claim_for_init(2) == []  # ready still counts against the cap
    assert jobs.transition(claimed[0], S.READY, S.RUNNING)  # a running slot took it: room for one
    more = jobs.claim_for_init(2)
    assert len(more) == 1 and more[0] not in claimed
    assert jobs.status_counts() == {"init": 2, "running": 1, "pending": 2}
    rest = [s for s in ids if s not in claimed + more]
    assert len(rest) == 2
    assert jobs.claim_for_init(10) == rest  # room for 8 more, only two left, in sample order
    assert jobs.status_counts().get("pending", 0) == 0
    assert jobs.claim_for_init(0) == []


def test_claim_order_is_priority_then_age_then_index(jobs):
    low, low_ids = new_task(jobs, 2, priority=0)
    time.sleep(0.01)
    high, high_ids = new_task(jobs, 2, priority=7)
    assert jobs.claim_for_init(3) == high_ids + low_ids[:1]


def test_claimed_sessions_are_not_claimed_twice(jobs):
    _, ids = new_task(jobs, 4)
    first = jobs.claim_for_init(4)
    for sid in first:
        assert not jobs.transition(sid, S.PENDING, S.INIT)  # already claimed
    assert sorted(first) == sorted(ids)


# -- groups and cursors ---------------------------------------------------------------------------

def test_finalize_once_with_increasing_cursors(jobs):
    first, _ = new_task(jobs, 1, instruction="one")
    second, _ = new_task(jobs, 1, instruction="two")
    third, _ = new_task(jobs, 1, instruction="three")
    c2 = jobs.finalize(second.id, {"samples": ["b"]})
    c1 = jobs.finalize(first.id, {"samples": ["a"]})
    assert c2 is not None and c1 is not None and c1 > c2  # cursors follow finishing order
    assert jobs.finalize(first.id, {"samples": ["again"]}) is None
    task = jobs.task(first.id)
    assert task.status == "finalized" and task.callback_status == "pending" and '"a"' in task.group_json
    assert jobs.task(third.id).status == "open"

    page = jobs.groups_after(0, 10)
    assert [(cursor, t.id) for cursor, t in page] == [(c2, second.id), (c1, first.id)]
    assert [t.id for _, t in jobs.groups_after(0, 1)] == [second.id]
    assert [t.id for _, t in jobs.groups_after(c2, 10)] == [first.id]
    assert jobs.groups_after(c1, 10) == []
    c3 = jobs.finalize(third.id, {"samples": []})
    assert c3 > c1
    assert [t.id for _, t in jobs.groups_after(c1, 10)] == [third.id]


def test_callback_status(jobs):
    task, _ = new_task(jobs, 1)
    jobs.finalize(task.id, {})
    jobs.set_callback_status(task.id, "delivered")
    assert jobs.task(task.id).callback_status == "delivered"


# -- idempotency ----------------------------------------------------------------------------------

def test_same_idempotency_key_and_body_gives_the_same_task(jobs):
    task, created = jobs.create_task(request(2), idempotency_key="key-1")
    again, created_again = jobs.create_task(request(2), idempotency_key="key-1")
    assert created and not created_again and again.id == task.id
    assert count_sessions(jobs) == 2


def test_same_idempotency_key_with_another_body_conflicts(jobs):
    jobs.create_task(request(2), idempotency_key="key-1")
    with pytest.raises(IdempotencyConflict):
        jobs.create_task(request(3), idempotency_key="key-1")
    with pytest.raises(IdempotencyConflict):
        jobs.create_task(request(2, instruction="something else"), idempotency_key="key-1")
    assert count_sessions(jobs) == 2


def test_different_keys_and_no_key_create_new_tasks(jobs):
    a, _ = jobs.create_task(request(1), idempotency_key="key-a")
    b, _ = jobs.create_task(request(1), idempotency_key="key-b")
    c, _ = jobs.create_task(request(1))
    d, _ = jobs.create_task(request(1))
    assert len({a.id, b.id, c.id, d.id}) == 4
    assert count_sessions(jobs) == 4


# -- cancellation and the sweeper's queries -------------------------------------------------------

def test_request_cancel(jobs):
    task, ids = new_task(jobs, 4)
    walk_to(jobs, ids[0], S.RUNNING)
    walk_to(jobs, ids[1], S.POSTRUN)
    jobs.finish(ids[1], S.DONE)
    walk_to(jobs, ids[2], S.INIT)
    pending = jobs.request_cancel(task.id)
    assert pending == [ids[3]]
    assert jobs.task(task.id).cancelled
    flags = {s.id: s.cancel_requested for s in jobs.sessions_of(task.id)}
    assert flags == {ids[0]: True, ids[1]: False, ids[2]: True, ids[3]: True}
    assert jobs.session(ids[0]).status == "running"  # the running stage stops it, not the store


def test_overdue(jobs):
    now = time.time()
    task, ids = new_task(jobs, 3)
    walk_to(jobs, ids[0], S.RUNNING)
    jobs.set_values(ids[0], deadline_at=now - 10)
    walk_to(jobs, ids[1], S.POSTRUN)
    jobs.set_values(ids[1], deadline_at=now - 10)
    jobs.finish(ids[1], S.DONE)  # terminal: never overdue
    jobs.set_values(ids[2], deadline_at=now + 100)
    assert jobs.overdue(now) == [(ids[0], "running")]
    assert jobs.overdue(now - 20) == []
    # past the group's deadline, every unfinished session is overdue, whatever its own budget
    later = task.deadline_at + 1
    assert sorted(jobs.overdue(later)) == sorted([(ids[0], "running"), (ids[2], "pending")])
