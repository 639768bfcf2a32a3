"""The intake API's Flask app with a temp SQLite store and a recording ``admit``: validation, auth, reads."""

from __future__ import annotations

import zlib

import pytest
from sqlmodel import Session as DbSession
from sqlmodel import func, select

from polar_jobs import jsonio
from polar_jobs.intake import create_intake_app
from polar_jobs.settings import Settings
from polar_jobs.store import CaptureStore, make_engine
from polar_jobs.store.jobs import JobStore
from polar_jobs.store.models import Session, SessionStatus as S, Task

pytestmark = pytest.mark.unit

VALID = {"instruction": "write 42 into answer.txt", "num_samples": 2,
         "agent": {"harness": "shell", "command": "echo {instruction}"}}


class Api:
    def __init__(self, tmp_path, **settings):
        engine = make_engine(f"sqlite:///{tmp_path / 'intake.db'}")
        self.settings = Settings(data_dir=tmp_path, **settings)
        self.jobs = JobStore(engine)
        self.admitted: list[int] = []
        self.app = create_intake_app(self.settings, self.jobs, CaptureStore(engine),
                                     admit=lambda: self.admitted.append(1),
                                     metrics_extra=lambda: {"polar_test_gauge": 7.0})
        self.client = self.app.test_client()

    def counts(self) -> tuple[int, int]:
        with DbSession(self.jobs.engine) as db:
            return (db.exec(select(func.count()).select_from(Task)).one(),
                    db.exec(select(func.count()).select_from(Session)).one())


@pytest.fixture
def api(tmp_path) -> Api:
    return Api(tmp_path)


def fields_of(response) -> set[str]:
    assert response.status_code == 422, response.get_data(as_text=True)
    return {f["field"] for f in response.get_json()["fields"]}


# -- submit ---------------------------------------------------------------------------------------

def test_valid_task_is_accepted_and_admitted(api):
    response = api.client.post("/v1/tasks", json=VALID)
    assert response.status_code == 202
    body = response.get_json()
    assert body["created"] is True and len(body["session_ids"]) == 2
    assert api.admitted == [1]
    assert api.counts() == (1, 2)
    assert {s.status for s in api.jobs.sessions_of(body["task_id"])} == {"pending"}


def test_invalid_request_names_every_invalid_field_and_creates_nothing(api):
    bad = {"instruction": "", "num_samples": 0, "agent": {"harness": "shell"},
           "evaluator": {"name": "output", "bogus": 1}, "priority": 12, "unknown_top": True}
    fields = fields_of(api.client.post("/v1/tasks", json=bad))
    assert fields == {"instruction", "num_samples", "agent", "evaluator.bogus", "priority", "unknown_top"}
    assert api.counts() == (0, 0)
    assert api.admitted == []


def test_missing_required_fields_are_named(api):
    assert fields_of(api.client.post("/v1/tasks", json={})) == {"instruction", "agent"}
    assert api.counts() == (0, 0) and api.admitted == []


def test_messages_say_what_is_wrong(api):
    response = api.client.post("/v1/tasks", json={**VALID, "agent": {"harness": "shell"}})
    (field,) = response.get_json()["fields"]
    assert field["field"] == "agent" and "agent.command" in field["message"]


def test_timeout_above_the_session_maximum_is_a_field_error(tmp_path):
    api = Api(tmp_path, max_session_seconds=600)
    assert fields_of(api.client.post("/v1/tasks", json={**VALID, "timeout_seconds": 601})) == {"timeout_seconds"}
    assert api.client.post("/v1/tasks", json={**VALID, "timeout_seconds": 600}).status_code == 202


def test_timeout_above_the_maximum_is_named_with_the_other_invalid_fields(tmp_path):
    api = Api(tmp_path, max_session_seconds=600)
    response = api.client.post("/v1/tasks", json={**VALID, "timeout_seconds": 10_000, "num_samples": -1})
    assert fields_of(response) == {"timeout_seconds", "num_samples"}
    assert api.counts() == (0, 0) and api.admitted == []


@pytest.mark.parametrize("data", [b"{not json", b"[1, 2", b"\xff\xfe", b"NaN"])
def test_non_json_body_is_a_400(api, data):
    response = api.client.post("/v1/tasks", data=data, content_type="application/json")
    assert response.status_code == 400
    assert "not valid JSON" in response.get_json()["error"]
    assert api.counts() == (0, 0) and api.admitted == []


@pytest.mark.parametrize("body", [[VALID], "a task", 42, None])
def test_a_body_that_is_not_an_object_is_a_422(api, body):
    response = api.client.post("/v1/tasks", data=jsonio.dumps(body), content_type="application/json")
    assert fields_of(response) == {"(body)"}
    assert api.counts() == (0, 0)


def test_idempotency_key(api):
    first = api.client.post("/v1/tasks", json=VALID, headers={"Idempotency-Key": "k1"})
    again = api.client.post("/v1/tasks", json=VALID, headers={"Idempotency-Key": "k1"})
    assert first.status_code == 202 and again.status_code == 200
    assert again.get_json()["created"] is False
    assert again.get_json()["task_id"] == first.get_json()["task_id"]
    assert again.get_json()["session_ids"] == first.get_json()["session_ids"]
    assert api.counts() == (1, 2) and api.admitted == [1]
    conflict = api.client.post("/v1/tasks", json={**VALID, "num_samples": 3}, headers={"Idempotency-Key": "k1"})
    assert conflict.status_code == 409
    assert api.counts() == (1, 2) and api.admitted == [1]
    other = api.client.post("/v1/tasks", json=VALID, headers={"Idempotency-Key": "k2"})
    assert other.status_code == 202 and other.get_json()["task_id"] != first.get_json()["task_id"]


# -- auth -----------------------------------------------------------------------------------------

def test_bearer_token(tmp_path):
    api = Api(tmp_path, api_token="s3cret")
    assert api.client.post("/v1/tasks", json=VALID).status_code == 401
    assert api.client.get("/v1/tasks", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert api.client.get("/v1/groups", headers={"Authorization": "s3cret"}).status_code == 401
    assert api.counts() == (0, 0)
    good = {"Authorization": "Bearer s3cret"}
    assert api.client.post("/v1/tasks", json=VALID, headers=good).status_code == 202
    assert api.client.get("/v1/tasks", headers=good).status_code == 200
    assert api.client.get("/v1/groups", headers=good).status_code == 200
    assert api.client.get("/healthz").status_code == 200  # probes need no token
    assert api.client.get("/metrics").status_code == 200


def test_no_token_configured_means_open(api):
    assert api.client.get("/v1/tasks").status_code == 200


# -- reads ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("method,path", [
    ("get", "/v1/tasks/nope"), ("delete", "/v1/tasks/nope"), ("get", "/v1/sessions/nope"),
    ("get", "/v1/sessions/nope/completions"), ("get", "/v1/sessions/nope/trajectory"), ("get", "/v1/nowhere"),
])
def test_unknown_ids_are_404_json(api, method, path):
    response = getattr(api.client, method)(path)
    assert response.status_code == 404
    assert response.is_json and response.get_json()["error"]


def test_task_session_and_trajectory_views(api):
    task_id = api.client.post("/v1/tasks", json=VALID).get_json()["task_id"]
    view = api.client.get(f"/v1/tasks/{task_id}").get_json()
    assert view["status"] == "open" and view["counts"] == {"pending": 2} and view["done"] == 0
    sid = view["sessions"][1]["session_id"]
    session = api.client.get(f"/v1/sessions/{sid}").get_json()
    assert session["task_id"] == task_id and session["sample_index"] == 1 and session["status"] == "pending"
    assert api.client.get(f"/v1/sessions/{sid}/completions").get_json() == {"completions": []}
    assert api.client.get(f"/v1/sessions/{sid}/trajectory").status_code == 404  # not built yet
    api.jobs.store_trajectory(sid, "prefix_merge", "complete", zlib.compress(b'{"traces": []}'))
    trajectory = api.client.get(f"/v1/sessions/{sid}/trajectory")
    assert trajectory.status_code == 200 and trajectory.get_json() == {"traces": []}
    listing = api.client.get("/v1/tasks").get_json()["tasks"]
    assert [t["task_id"] for t in listing] == [task_id]


def test_task_list_limit_must_be_an_integer(api):
    assert api.client.get("/v1/tasks?limit=abc").status_code == 400


def test_cancel_ends_pending_sessions(api):
    task_id = api.client.post("/v1/tasks", json=VALID).get_json()["task_id"]
    sessions = api.jobs.sessions_of(task_id)
    assert api.jobs.transition(sessions[0].id, S.PENDING, S.INIT)
    response = api.client.delete(f"/v1/tasks/{task_id}")
    assert response.status_code == 202
    view = response.get_json()
    assert view["cancelled"] is True
    assert view["counts"] == {"init": 1, "cancelled": 1}
    assert api.jobs.session(sessions[0].id).cancel_requested
    assert api.admitted == [1, 1]  # after the submit and after the cancel


def test_metrics(api):
    api.client.post("/v1/tasks", json=VALID)
    text = api.client.get("/metrics").get_data(as_text=True)
    assert 'polar_sessions{state="pending"} 2' in text
    assert 'polar_groups{state="open"} 1' in text
    assert "polar_test_gauge 7.0" in text


# -- groups ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("query", ["after=-1", "limit=0", "limit=101", "after=abc", "limit=1.5"])
def test_group_paging_parameters_are_validated(api, query):
    assert api.client.get(f"/v1/groups?{query}").status_code == 400


def test_groups_paging(api):
    assert api.client.get("/v1/groups").get_json() == {"groups": [], "next": 0}
    tasks = [api.client.post("/v1/tasks", json={**VALID, "instruction": f"task {i}"}).get_json()["task_id"]
             for i in range(3)]
    cursors = [api.jobs.finalize(task_id, {"task_id": task_id, "samples": []}) for task_id in tasks]
    page = api.client.get("/v1/groups?after=0&limit=2").get_json()
    assert [g["task_id"] for g in page["groups"]] == tasks[:2]
    assert [g["cursor"] for g in page["groups"]] == cursors[:2]
    assert page["next"] == cursors[1]
    rest = api.client.get(f"/v1/groups?after={page['next']}&limit=2").get_json()
    assert [g["task_id"] for g in rest["groups"]] == tasks[2:]
    assert rest["next"] == cursors[2]
    empty = api.client.get(f"/v1/groups?after={rest['next']}").get_json()
    assert empty == {"groups": [], "next": cursors[2]}  # nothing new: the cursor stays


def test_groups_with_and_without_traces(api):
    task_id = api.client.post("/v1/tasks", json={**VALID, "num_samples": 1}).get_json()["task_id"]
    sid = api.jobs.sessions_of(task_id)[0].id
    trace = {"prompt_ids": [1, 2], "response_ids": [3], "loss_mask": [1], "response_logprobs": [-0.5],
             "finish_reason": "stop", "label": "main", "extra": "not exported"}
    api.jobs.store_trajectory(sid, "prefix_merge", "complete",
                              zlib.compress(jsonio.dumps({"rollout_id": "r1", "traces": [trace]})))
    api.jobs.finalize(task_id, {"task_id": task_id, "samples": [{"session_id": sid, "reward": 1.0}]})
    (group,) = api.client.get("/v1/groups?after=0").get_json()["groups"]
    (sample,) = group["samples"]
    assert sample["rollout_id"] == "r1"
    assert sample["traces"] == [{k: v for k, v in trace.items() if k != "extra"}]
    (bare,) = api.client.get("/v1/groups?after=0&traces=0").get_json()["groups"]
    assert "traces" not in bare["samples"][0]
