"""What sits around the pipeline: Flower watching the three workers, and the signed group callback."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest
import requests
from flask import Flask, request

from polar_jobs import jsonio
from polar_jobs.serving import BackgroundServer
from polar_jobs.stack import free_port
from polar_jobs.tasks import groups as group_signing
from tests.integration.pipeline_stack import live, pipeline_stack, wait_for  # noqa: F401

pytestmark = pytest.mark.integration


def test_flower_lists_the_three_workers_and_their_queues(live):
    port = free_port()
    log = open(live.settings.data_dir / "logs" / "flower.log", "ab")
    flower = subprocess.Popen([sys.executable, "-m", "polar_jobs.cli", "flower", "--port", str(port),
                               "--unauthenticated-api"], env=live.stack.env(), stdout=log, stderr=subprocess.STDOUT)
    try:
        def workers() -> dict:
            if flower.poll() is not None:
                raise AssertionError(f"flower exited with {flower.returncode}")
            try:
                response = requests.get(f"http://127.0.0.1:{port}/api/workers", params={"refresh": 1}, timeout=10)
            except requests.ConnectionError:
                return {}
            assert response.status_code == 200, response.text
            return response.json()

        def complete(found: dict) -> bool:
            return {name.split("@")[0] for name, info in found.items() if info.get("active_queues")} >= {
                "init", "running", "postrun"}

        found = wait_for(workers, complete, 40, "flower to see the workers", interval=1.0)
    finally:
        flower.terminate()
        flower.wait(timeout=10)
        log.close()
    by_role = {name.split("@")[0]: info for name, info in found.items()}
    assert set(by_role) == {"init", "running", "postrun"}
    for role, info in by_role.items():
        assert [queue["name"] for queue in info["active_queues"]] == [role]
    assert by_role["running"]["stats"]["pool"]["max-concurrency"] == live.stack.running_concurrency
    assert "polar_jobs.running" in by_role["running"]["registered"]


class Receiver:
    """A callback endpoint that records what it is sent."""

    def __init__(self):
        self.posts: list[tuple[dict[str, str], bytes]] = []
        self.lock = threading.Lock()
        app = Flask("receiver")

        @app.post("/hook")
        def hook():
            with self.lock:
                self.posts.append((dict(request.headers), request.get_data()))
            return {"ok": True}

        self.server = BackgroundServer(app)
        self.url = f"{self.server.url}/hook"


def test_callback_is_posted_once_and_its_signature_verifies(live, marker):
    receiver = Receiver()
    try:
        submitted = live.submit_ok({"instruction": f"call me back ({marker})", "num_samples": 2,
                                    "timeout_seconds": 30, "callback_url": receiver.url,
                                    "agent": {"harness": "shell", "command": "true"}})
        wait_for(lambda: live.task(submitted["task_id"]), lambda v: v["callback_status"] == "delivered", 30,
                 "the callback to be delivered")
        wait_for(lambda: len(receiver.posts), lambda n: n >= 1, 5, "the callback POST")
        time.sleep(1.5)  # a second POST would come now
    finally:
        receiver.server.stop()
    assert len(receiver.posts) == 1
    headers, body = receiver.posts[0]
    timestamp, signature = headers[group_signing.TIMESTAMP_HEADER], headers[group_signing.SIGNATURE_HEADER]
    secret = live.settings.callback_secret
    assert group_signing.verify(secret, timestamp, body, signature)
    assert not group_signing.verify(secret, timestamp, body.replace(b'"num_samples":2', b'"num_samples":3'),
                                    signature)
    assert not group_signing.verify(secret, str(int(timestamp) + 1), body, signature)
    assert not group_signing.verify("another-secret", timestamp, body, signature)
    assert not group_signing.verify(secret, str(int(timestamp) - 3600), body,  # a replay, re-signed or not
                                    group_signing.sign(secret, str(int(timestamp) - 3600), body))
    payload = jsonio.loads(body)
    assert payload["task_id"] == submitted["task_id"] and payload["num_samples"] == 2
    assert [s["session_id"] for s in payload["samples"]] == submitted["session_ids"]
    group, _ = live.poll_group(submitted["task_id"])
    assert payload["cursor"] == group["cursor"]
