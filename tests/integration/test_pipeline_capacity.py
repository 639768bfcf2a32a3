"""Back-pressure on a stack of its own: READY cap 2 and one running slot, 50 sessions queued at once."""

from __future__ import annotations

import threading
import time

import pytest

from tests.integration.pipeline_stack import dump_logs_if_failed, start_pipeline

pytestmark = pytest.mark.integration

READY_CAP = 2
SESSIONS = 50


@pytest.fixture(scope="module")
def small_stack(sim):
    live = start_pipeline(sim.url, ready_cap=READY_CAP, running_concurrency=1)
    yield live
    live.stop()


@pytest.fixture
def capped(small_stack, request):
    failed_before = request.session.testsfailed
    yield small_stack
    dump_logs_if_failed(request, small_stack, failed_before)


def test_ready_never_exceeds_its_bound_with_50_sessions_queued(capped, marker):
    samples: list[dict[str, int]] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            samples.append(capped.jobs.status_counts())
            time.sleep(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        submitted = capped.submit_ok({"instruction": f"short work ({marker})", "num_samples": SESSIONS,
                                      "timeout_seconds": 120,
                                      "agent": {"harness": "shell", "command": "sleep 0.2"},
                                      "evaluator": {"name": "session_completed"}})
        metrics_seen = []
        deadline = time.time() + 120
        while time.time() < deadline:
            metrics_seen.append(capped.get("/metrics").text)
            if capped.task(submitted["task_id"])["status"] == "finalized":
                break
            time.sleep(0.3)
    finally:
        stop.set()
        sampler.join(timeout=5)

    view = capped.task(submitted["task_id"])
    assert view["status"] == "finalized", view["counts"]
    assert view["counts"] == {"done": SESSIONS} and view["done"] == SESSIONS
    assert {s["reward"] for s in view["sessions"]} == {1.0}

    buffered = [counts.get("init", 0) + counts.get("ready", 0) for counts in samples]
    running = [counts.get("running", 0) for counts in samples]
    pending = [counts.get("pending", 0) for counts in samples]
    assert len(samples) > 50  # the sampler saw the run, not just its end
    assert max(buffered) <= READY_CAP, [c for c in samples if c.get("init", 0) + c.get("ready", 0) > READY_CAP][:5]
    assert max(buffered) == READY_CAP  # the buffer did fill: the bound, not idleness, held it
    assert max(running) <= 1  # one running slot
    assert max(pending) >= SESSIONS - READY_CAP - 1  # the rest waited in the DB, not in a queue
    for text in metrics_seen:  # the /metrics gauges agree
        gauges = dict(line.rsplit(" ", 1) for line in text.splitlines() if line and not line.startswith("#"))
        assert float(gauges['polar_sessions{state="init"}']) + float(gauges['polar_sessions{state="ready"}']) \
            <= READY_CAP
        assert float(gauges['polar_queue_length{queue="init"}']) <= READY_CAP
