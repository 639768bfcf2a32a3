"""A minimal OpenAI-Chat coding agent for the shell harness (demo, tests, benchmarks).

``python -m polar_jobs.harnesses.mini_agent "INSTRUCTION"``: asks the model at ``$OPENAI_BASE_URL``
with ``$OPENAI_API_KEY``, runs the ``run_shell`` tool calls it makes in the current directory, sends
the results back, and stops when the model answers without a tool call (or after ``--max-steps``).
Standard library only, so it runs in any runtime that has Python.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request

SHELL_TOOL = {"type": "function", "function": {
    "name": "run_shell", "description": "Run a shell command in the repository and return its output.",
    "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}
SYSTEM = "You are a coding agent. Use run_shell to inspect and change files; answer briefly when done."


def ask(messages: list[dict], model: str, retries: int = 3) -> dict:
    request = urllib.request.Request(
        os.environ["OPENAI_BASE_URL"].rstrip("/") + "/chat/completions",
        data=json.dumps({"model": model, "messages": messages, "tools": [SHELL_TOOL]}).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {os.environ['OPENAI_API_KEY']}"})
    for attempt in range(retries + 1):
        try:
            with urllib.request.urlopen(request, timeout=600) as response:
                return json.loads(response.read())["choices"][0]["message"]
        except urllib.error.HTTPError as error:
            if error.code not in (429, 503, 529) or attempt == retries:
                raise
            time.sleep(0.5 * (attempt + 1))
    raise RuntimeError("unreachable")


def run(instruction: str, model: str, max_steps: int) -> int:
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": instruction}]
    for _ in range(max_steps):
        reply = ask(messages, model)
        calls = reply.get("tool_calls") or []
        messages.append({key: reply[key] for key in ("role", "content", "tool_calls", "reasoning_content")
                         if reply.get(key) is not None or key == "content"})
        if not calls:
            print(reply.get("content") or "")
            return 0
        for call in calls:
            command = json.loads(call["function"]["arguments"] or "{}").get("command", "")
            done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=300)
            output = (done.stdout + done.stderr)[-4000:]
            print(f"$ {command}\n{output}", end="" if output.endswith("\n") else "\n")
            messages.append({"role": "tool", "tool_call_id": call["id"],
                             "content": f"exit code {done.returncode}\n{output}"})
    print("stopped: step limit reached", file=sys.stderr)
    return 2


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("instruction")
    parser.add_argument("--model", default=os.environ.get("POLAR_MODEL", "default"))
    parser.add_argument("--max-steps", type=int, default=20)
    args = parser.parse_args()
    return run(args.instruction, args.model, args.max_steps)


if __name__ == "__main__":
    sys.exit(main())
