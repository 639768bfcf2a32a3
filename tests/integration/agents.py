"""Scripted harnesses for the trajectory tier: real SDK clients driving real agent loops through the
proxy, echoing each reply the way a given harness does (whole, without reasoning, compacted...)."""

from __future__ import annotations

import json
from typing import Any

import openai

from tests.servers import SimControl

SHELL_TOOL = {"type": "function", "function": {
    "name": "run_shell", "description": "Run a shell command and return its output.",
    "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}


def script_tool_loop(sim: SimControl, marker: str, round_trips: int, reasoning: bool = False,
                     final_text: str = "All done.") -> None:
    """The sim answers calls carrying ``marker`` with ``round_trips`` tool calls, then a final text."""
    for index in range(round_trips):
        call = {"name": "run_shell", "arguments": {"command": f"step {index} of {marker}"}}
        policy = ({"kind": "reasoning_tool_call", "reasoning": f"Thinking about step {index}.", **call}
                  if reasoning else {"kind": "tool_call", **call})
        sim.rule(policy, times=1, any_contains=marker)
    sim.rule({"kind": "text", "text": final_text}, any_contains=marker)


class ChatAgent:
    """An OpenAI-Chat harness (Qwen Code, opencode, pi): appends every reply and tool result verbatim."""

    def __init__(self, client: openai.OpenAI, system: str, task: str, echo_reasoning: bool = True):
        self.client = client
        self.echo_reasoning = echo_reasoning
        self.messages: list[dict[str, Any]] = [{"role": "system", "content": system},
                                               {"role": "user", "content": task}]

    def step(self) -> bool:
        """One model call; runs the requested tool. False once the model answered without a tool call."""
        reply = self.client.chat.completions.create(model="agent", messages=self.messages, tools=[SHELL_TOOL])
        message = reply.choices[0].message
        echoed: dict[str, Any] = {"role": "assistant", "content": message.content}
        reasoning = getattr(message, "reasoning_content", None) or (message.model_extra or {}).get("reasoning_content")
        if reasoning and self.echo_reasoning:
            echoed["reasoning_content"] = reasoning
        if message.tool_calls:
            echoed["tool_calls"] = [{"id": c.id, "type": "function", "function": {
                "name": c.function.name, "arguments": json.dumps(json.loads(c.function.arguments))}}
                for c in message.tool_calls]
        self.messages.append(echoed)
        for call in message.tool_calls or []:
            command = json.loads(call.function.arguments)["command"]
            self.messages.append({"role": "tool", "tool_call_id": call.id, "content": f"$ {command}\nok"})
        return bool(message.tool_calls)

    def run(self, max_steps: int = 50) -> int:
        steps = 0
        while steps < max_steps:
            steps += 1
            if not self.step():
                break
        return steps

    def say(self, text: str) -> None:
        self.messages.append({"role": "user", "content": text})

    def compact(self, summary: str) -> None:
        """What a harness does when its context fills up: the history becomes one summary message."""
        self.messages = [self.messages[0], {"role": "user", "content": f"Summary of the work so far: {summary}"}]
