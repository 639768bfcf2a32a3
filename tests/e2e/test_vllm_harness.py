"""A real harness CLI (pi) through the whole pipeline against the REAL vLLM server (CPU build, tiny model).

A separate stack (intake, init/running/postrun workers, proxy) whose upstream is the tier's vLLM server
runs the hello.txt task with pi. The model's output is scripted with ``polar-script`` markers: the
instruction carries the first one (a ``bash`` tool call), and the command the tool runs prints the second
one, so pi's next call (whose prompt ends with the tool's output) gets the final-answer script.

Checked: the session is ``done`` with reward 1.0 (``output`` evaluator) and hello.txt holds polar; every
captured call has vLLM's own prompt ids (= ``/tokenize`` of the stored normalized request) and sampled
ids; ``build_trajectory`` (prefix_merge) passes its invariants with one ``main`` trace.
"""

from __future__ import annotations

import json
import os

import pytest

from polar_jobs.store import CaptureStore, make_engine
from polar_jobs.trajectory.build import build_trajectory
from tests.e2e.vllm_tier import MODEL, assert_vllm_fidelity, vllm  # noqa: F401
from tests.integration.pipeline_stack import dump_logs_if_failed, start_pipeline

pytestmark = pytest.mark.e2e


def tool_script(name: str, command: str) -> str:
    return (f"<think>\nRun a command.\n</think>\n\n<tool_call>\n<function={name}>\n"
            f"<parameter=command>\n{command}\n</parameter>\n</function>\n</tool_call>")


def answer(text: str) -> str:
    return f"<think>\nDone.\n</think>\n\n{text}"


class _Captures:
    """What ``assert_vllm_fidelity`` needs of a proxy: the captures of one session (from the stack's DB)."""

    def __init__(self, database_url: str):
        self.store = CaptureStore(make_engine(database_url))

    def captures(self, session_id: str):
        return self.store.load_session(session_id)


@pytest.fixture(scope="module")
def vstack(vllm):  # noqa: F811
    """A pipeline stack whose proxy points at the real vLLM server and its served model name."""
    previous = os.environ.get("POLAR_SERVED_MODEL")
    os.environ["POLAR_SERVED_MODEL"] = MODEL  # the stack's children read their settings from the env
    try:
        live = start_pipeline(vllm.url, served_model=MODEL, upstream_timeout_s=300.0)
    finally:
        if previous is None:
            os.environ.pop("POLAR_SERVED_MODEL", None)
        else:
            os.environ["POLAR_SERVED_MODEL"] = previous
    yield live
    live.stop()


@pytest.fixture
def vlive(vstack, request):
    failed_before = request.session.testsfailed
    yield vstack
    dump_logs_if_failed(request, vstack, failed_before)


def test_pi_writes_hello_through_the_pipeline_on_real_vllm(vlive, vllm):  # noqa: F811
    final = "Done: hello.txt contains polar."
    second = vllm.script(answer(final))  # the tool's output carries it: the second call answers
    first = vllm.script(tool_script("bash", f"echo polar > hello.txt; echo {second}"))
    instruction = f"Create hello.txt containing the word polar. ({first})"
    timeout = 240
    task = {"instruction": instruction, "num_samples": 1, "timeout_seconds": timeout,
            "agent": {"harness": "pi", "model": MODEL},
            "evaluator": {"name": "output",
                          "config": {"checks": [{"kind": "file_content", "path": "hello.txt", "contains": "polar"}]}}}
    submitted = vlive.submit_ok(task)
    (session_id,) = submitted["session_ids"]
    vlive.wait_task(submitted["task_id"], timeout=timeout + 60)

    view = vlive.session(session_id)
    assert view["status"] == "done", json.dumps(view, indent=1)[:4000]
    assert view["result"]["harness"]["exit_code"] == 0, view["result"]["harness"]
    assert (vlive.session_dir(session_id) / "workspace" / "hello.txt").read_text().strip() == "polar"
    assert view["result"]["evaluation"]["reward"] == 1.0 and view["reward"] == 1.0
    log = (vlive.session_dir(session_id) / "harness.log")
    if log.exists():
        assert final in log.read_text(errors="replace")

    # every call: vLLM's own prompt ids (= /tokenize of the stored normalized request) and sampled ids
    captured = assert_vllm_fidelity(_Captures(vlive.settings.resolved_database_url()), vllm, session_id,
                                    expected_calls=2)
    assert all(c.chat_request["model"] == MODEL for c in captured)
    assert {t["function"]["name"] for t in captured[0].chat_request["tools"]} == {"read", "bash", "edit", "write"}

    trajectory = build_trajectory(session_id, captured, builder="prefix_merge")  # runs the invariants
    assert [trace.label for trace in trajectory.traces] == ["main"], trajectory.breaks
    assert not trajectory.breaks
    assert len(trajectory.traces[0].spans) == 2

    # and the stack's own postrun trajectory agrees
    stored = vlive.get(f"/v1/sessions/{session_id}/trajectory").json()
    assert stored["builder"] == "prefix_merge" and stored["status"] == "complete", stored.get("reasons")
    assert [trace["label"] for trace in stored["traces"]] == ["main"]
