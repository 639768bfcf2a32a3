"""Real HTTP servers on free loopback ports, in threads, for the integration tier."""

from __future__ import annotations

import requests

from polar_jobs.serving import BackgroundServer


ServerThread = BackgroundServer


class SimControl:
    """Sets the sim upstream's scripted policies over its own HTTP control routes."""

    def __init__(self, url: str):
        self.url = url

    def rule(self, policy: dict, times: int | None = None, **match) -> None:
        rule = {"match": match, "policy": policy}
        if times:
            rule["times"] = times
        response = requests.post(f"{self.url}/sim/rules", json=[rule], timeout=5)
        response.raise_for_status()

    def tokenize_chat(self, chat_request: dict) -> list[int]:
        body = {key: chat_request[key] for key in ("model", "messages", "tools", "chat_template_kwargs")
                if key in chat_request}
        response = requests.post(f"{self.url}/tokenize", json=body, timeout=10)
        response.raise_for_status()
        return response.json()["tokens"]

    def detokenize(self, ids: list[int]) -> str:
        response = requests.post(f"{self.url}/detokenize", json={"tokens": ids}, timeout=10)
        response.raise_for_status()
        return response.json()["prompt"]
