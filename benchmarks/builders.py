"""What building a trajectory costs: build time and peak memory of both builders on long agent sessions.

    python benchmarks/builders.py [--calls 200] [--context 32768] [--repeats 5] [--no-profile]

Generates synthetic sessions directly as ``CapturedCompletion`` objects (no proxy, no HTTP) the way
the sim upstream would serve them: each call's prompt ids are the real Qwen3.5 template
(``polar_jobs.sim.template.render_chat``) over the harness's growing OpenAI-Chat message list,
encoded with the real tokenizer; each call's sampled ids are the policy's text
(``polar_jobs.sim.policies.render_policy``) encoded, plus ``<|im_end|>``
(``polar_jobs.sim.completion.complete`` does both); the harness echoes the parsed reply back
verbatim, reasoning included, and appends a tool result of varying size. The system prompt and tools
are ~6k tokens and the main agent's prompt grows to about ``--context`` tokens by its last call.

Session shapes:

- ``append-only``: one agent, ``--calls`` calls (the goal: one trace per append-only context);
- ``side+compaction``: the same agent plus an interleaved side agent (other system prompt, 20 calls)
  and one history compaction (the agent restarts from a summary two thirds of the way in);
- ``no-think``: the agent replies without reasoning, so the template re-renders each reply with an
  empty think block the model never sampled (tokens differ; only ``decode`` can judge the re-render).

For each builder (``per_request``, ``prefix_merge``), with ``decode=None`` and with the tokenizer's
``decode``, it measures the build (``build_trajectory``, invariant checks included): median build
time of ``--repeats`` runs (``time.perf_counter``), peak memory of a separate run (``tracemalloc``),
traces, breaks, trained tokens (sum of loss masks), tokens in traces (prompt + response), and the
session's captured tokens; across session sizes it reports build time per 1k captured tokens (the
"linear in total tokens" check). Everything is seeded; it prints plain-text tables and a markdown
summary and asserts nothing about timings.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import json
import platform
import pstats
import random
from pathlib import Path
import statistics
import sys
import time
import tracemalloc
from dataclasses import dataclass, field
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere
from benchmarks.words import CODE_TOKENS, WORDS  # noqa: E402
from polar_jobs.sim import tokenizer
from polar_jobs.sim.completion import complete
from polar_jobs.sim.policies import render_policy
from polar_jobs.sim.template import render_chat
from polar_jobs.store import CapturedCompletion
from polar_jobs.trajectory import Trajectory, build_trajectory

MAX_MODEL_LEN = 1 << 20  # never the limit here: sessions are sized by --context
SERVED_MODEL = "polar-sim-qwen3"
SYSTEM_TOKENS = 6000  # the main agent's system block (instructions + tool schemas)
SIDE_SYSTEM_TOKENS = 1500
SIDE_CALLS = 20
GOAL_SECONDS = 1.0

# ------------------------------------------------------------------------------------------------
# deterministic text
# ------------------------------------------------------------------------------------------------
_DIRS = ("src/polar", "src/polar/store", "src/polar/trajectory", "tests/unit", "tests/integration", "docs")


def prose(rng: random.Random, words: int) -> str:
    """English-like sentences of about ``words`` words (ASCII, no leading/trailing whitespace)."""
    out: list[str] = []
    count = 0
    while count < words:
        sentence = [rng.choice(WORDS) for _ in range(rng.randint(6, 16))]
        if rng.random() < 0.2:
            sentence.insert(rng.randrange(len(sentence)), f"`{rng.choice(CODE_TOKENS)}_{rng.randint(1, 99)}`")
        out.append(" ".join(sentence).capitalize() + rng.choice(".....:;"))
        count += len(sentence)
        if rng.random() < 0.1:
            out.append("\n\n-")
    return " ".join(out).strip(" -\n")


def source_path(rng: random.Random) -> str:
    return f"{rng.choice(_DIRS)}/{rng.choice(WORDS)}_{rng.choice(WORDS)}.py"


def code(rng: random.Random, lines: int) -> str:
    out, indent = [], 0
    for _ in range(lines):
        name = f"{rng.choice(WORDS)}_{rng.choice(WORDS)}"
        kind = rng.random()
        if kind < 0.15:
            out.append(f"def {name}({rng.choice(WORDS)}, {rng.choice(WORDS)}={rng.randint(0, 99)}):")
            indent = 1
        elif kind < 0.25:
            out.append("    " * indent + f"if {name} is not None and len({rng.choice(WORDS)}) > {rng.randint(1, 64)}:")
            indent = 2
        else:
            out.append("    " * indent + f"{name} = {rng.choice(CODE_TOKENS)}({rng.choice(WORDS)}, {rng.randint(0, 999)})")
    return "\n".join(out).strip()


def tool_output(rng: random.Random, tokens: int) -> str:
    """A tool result of about ``tokens`` tokens: shell output, file contents or grep hits."""
    kind = rng.random()
    parts: list[str] = []
    budget = int(tokens * 1.3) + 8
    while budget > 0:
        if kind < 0.4:
            piece = code(rng, rng.randint(3, 12))
        elif kind < 0.7:
            piece = "\n".join(f"{source_path(rng)}:{rng.randint(1, 900)}: {prose(rng, rng.randint(4, 10))}"
                              for _ in range(rng.randint(2, 6)))
        else:
            piece = prose(rng, rng.randint(20, 60))
        parts.append(piece)
        budget -= len(tokenizer.encode(piece)) + 1
    ids = tokenizer.encode("\n".join(parts))[:max(tokens, 1)]
    return tokenizer.decode(ids).strip() or "ok"


# ------------------------------------------------------------------------------------------------
# the agent: tools, system prompt, policies
# ------------------------------------------------------------------------------------------------
def _string(description: str) -> dict[str, str]:
    return {"type": "string", "description": description}


def make_tools(rng: random.Random) -> list[dict[str, Any]]:
    """Six OpenAI function tools with string parameters and realistic descriptions."""
    specs = {
        "run_shell": ("command",), "read_file": ("path",), "write_file": ("path", "content"),
        "edit_file": ("path", "old_string", "new_string"), "grep": ("pattern", "path"), "list_dir": ("path",),
    }
    tools = []
    for name, params in specs.items():
        tools.append({"type": "function", "function": {
            "name": name, "description": prose(rng, rng.randint(60, 140)),
            "parameters": {"type": "object", "properties": {p: _string(prose(rng, rng.randint(10, 30))) for p in params},
                           "required": list(params)}}})
    return tools


def system_prompt(rng: random.Random, tools: list[dict[str, Any]], target: int, marker: str) -> str:
    """Instructions sized so the whole system block (with the tool list) is about ``target`` tokens."""
    base = len(tokenizer.encode(render_chat([{"role": "system", "content": marker},
                                             {"role": "user", "content": "x"}], tools=tools,
                                            add_generation_prompt=False)))
    text = marker + "\n\n" + prose(rng, max(target - base, 50) * 2)
    ids = tokenizer.encode(text)[:max(target - base, 50)]
    return tokenizer.decode(ids).strip()


def tool_call_policy(rng: random.Random, reasoning: bool, per_call: float) -> dict[str, Any]:
    """One tool call the model samples (with a thinking block when ``reasoning``), sized for a round trip
    (reply + tool result) of about ``per_call`` tokens."""
    lines = max(1, min(6, int(per_call // 60)))
    name = rng.choices(["run_shell", "read_file", "edit_file", "grep", "write_file", "list_dir"], [5, 5, 4, 3, 1, 1])[0]
    path = source_path(rng)
    if name == "run_shell":
        arguments = {"command": rng.choice([f"python -m pytest {path} -q -x",
                                            f"git diff --stat HEAD~{rng.randint(1, 5)}",
                                            f"ruff check {path}", f"python -c 'import {rng.choice(WORDS)}'"])}
    elif name == "read_file":
        arguments = {"path": path}
    elif name == "edit_file":
        arguments = {"path": path, "old_string": code(rng, rng.randint(1, lines)), "new_string": code(rng, rng.randint(1, lines))}
    elif name == "grep":
        arguments = {"pattern": f"def {rng.choice(WORDS)}_", "path": rng.choice(_DIRS)}
    elif name == "write_file":
        arguments = {"path": path, "content": code(rng, rng.randint(lines, 3 * lines))}
    else:
        arguments = {"path": rng.choice(_DIRS)}
    if reasoning:
        words = rng.randint(max(4, min(20, int(per_call * 0.05))), max(8, min(70, int(per_call * 0.2))))
        return {"kind": "reasoning_tool_call", "reasoning": prose(rng, words), "name": name,
                "arguments": arguments}
    return {"kind": "tool_call", "name": name, "arguments": arguments}


def final_policy(rng: random.Random, reasoning: bool) -> dict[str, Any]:
    text = "Done. " + prose(rng, rng.randint(30, 80))
    return {"kind": "reasoning", "reasoning": prose(rng, 30), "text": text} if reasoning else {"kind": "text", "text": text}


def turn_tokens(policy: dict[str, Any]) -> int:
    """Tokens one assistant turn adds to the history (sampled text plus template glue, approximately)."""
    return len(tokenizer.encode(render_policy(policy))) + 5


# ------------------------------------------------------------------------------------------------
# sessions as captured completions
# ------------------------------------------------------------------------------------------------
@dataclass
class Clock:
    now: float = 1_700_000_000.0
    next_id: int = 1

    def tick(self) -> tuple[int, float]:
        self.now += 1.0
        self.next_id += 1
        return self.next_id - 1, self.now


@dataclass
class Agent:
    """An OpenAI-Chat harness: every reply echoed verbatim (reasoning included), tool results appended."""

    session_id: str
    tools: list[dict[str, Any]]
    messages: list[dict[str, Any]]
    policies: list[dict[str, Any]]  # one a call
    result_tokens: list[int]  # the size of the tool result after each call
    rng: random.Random
    captured: list[CapturedCompletion] = field(default_factory=list)

    def step(self, clock: Clock) -> CapturedCompletion:
        index = len(self.captured)
        body = {"messages": list(self.messages), "tools": self.tools}
        result = complete(body, self.policies[index], MAX_MODEL_LEN)  # render_chat + encode; policy text + <|im_end|>
        completion_id, now = clock.tick()
        parsed = result.parsed
        calls = [{"id": f"call_{completion_id}_{n}", "type": "function", "function": dict(call)}
                 for n, call in enumerate(parsed.tool_calls)]
        message = {"role": "assistant", "content": parsed.content, "reasoning": parsed.reasoning, "tool_calls": calls}
        captured = CapturedCompletion(
            id=completion_id, session_id=self.session_id, provider="openai", path="/v1/chat/completions",
            stream=False, requested_model="agent", served_model=SERVED_MODEL, status="ok", http_status=200,
            error=None, finish_reason=result.finish_reason, stop_reason=result.stop_reason,
            prompt_tokens=len(result.prompt_ids), completion_tokens=len(result.token_ids), trainable=True,
            policy_version=1, prompt_ids=result.prompt_ids, response_ids=result.token_ids, logprobs=result.logprobs,
            received_at=now, upstream_started_at=now + 0.001, upstream_finished_at=now + 0.5, responded_at=now + 0.5,
            raw_request=None, chat_request=body,
            upstream_response={"id": f"chatcmpl-{completion_id}", "object": "chat.completion", "model": SERVED_MODEL,
                               "choices": [{"index": 0, "message": message, "finish_reason": result.finish_reason}]})
        self.captured.append(captured)
        echoed: dict[str, Any] = {"role": "assistant", "content": parsed.content}
        if parsed.reasoning:
            echoed["reasoning_content"] = parsed.reasoning
        if calls:
            echoed["tool_calls"] = [{"id": c["id"], "type": "function", "function": {
                "name": c["function"]["name"], "arguments": json.dumps(json.loads(c["function"]["arguments"]))}}
                for c in calls]
        self.messages.append(echoed)
        for call in calls:
            self.messages.append({"role": "tool", "tool_call_id": call["id"],
                                  "content": tool_output(self.rng, self.result_tokens[index])})
        return captured

    def compact(self) -> None:
        """The history becomes one summary message (a harness whose context filled up)."""
        summary = "Summary of the work so far: " + prose(self.rng, 400)
        self.messages = [self.messages[0], {"role": "user", "content": summary}]


def make_agent(seed: int, session_id: str, calls: int, context: int, system_tokens: int, marker: str,
               reasoning: bool = True) -> Agent:
    """An agent whose prompt grows from ``system_tokens`` to about ``context`` tokens over ``calls`` calls."""
    rng = random.Random(seed)
    tools = make_tools(random.Random(seed + 1))
    system = system_prompt(rng, tools, system_tokens, marker)
    task = "Fix the failing tests in the tokenizer module. " + prose(rng, 80)
    per_call = (context - system_tokens - 120) / max(calls - 1, 1)
    policies = [tool_call_policy(rng, reasoning, per_call) for _ in range(calls - 1)] + [final_policy(rng, reasoning)]
    replies = sum(turn_tokens(p) for p in policies[:-1])
    glue = 12  # <|im_start|>user / <tool_response> ... </tool_response><|im_end|> / generation prompt
    budget = context - system_tokens - 120 - replies - glue * (calls - 1)
    weights = [rng.lognormvariate(0.0, 1.0) for _ in range(calls - 1)]
    scale = max(budget, 0) / (sum(weights) or 1.0)
    result_tokens = [max(8, int(w * scale)) for w in weights] + [0]
    messages = [{"role": "system", "content": system}, {"role": "user", "content": task}]
    return Agent(session_id, tools, messages, policies, result_tokens, rng)


@dataclass
class Session:
    name: str
    calls: int
    context: int
    captured: list[CapturedCompletion]
    generate_s: float
    first_prompt: int = 0
    max_prompt: int = 0
    prompt_tokens: int = 0
    response_tokens: int = 0

    def __post_init__(self) -> None:
        self.first_prompt = len(self.captured[0].prompt_ids)
        self.max_prompt = max(len(c.prompt_ids) for c in self.captured)
        self.prompt_tokens = sum(len(c.prompt_ids) for c in self.captured)
        self.response_tokens = sum(len(c.response_ids) for c in self.captured)

    @property
    def captured_tokens(self) -> int:
        return self.prompt_tokens + self.response_tokens

    def release(self) -> None:
        """Drop the captures (measured): later builds run with only their own session in memory."""
        self.captured = []


def append_only(calls: int, context: int, seed: int = 7, reasoning: bool = True, name: str = "append-only") -> Session:
    started = time.perf_counter()
    clock = Clock()
    agent = make_agent(seed, f"bench-{name}-{calls}-{context}", calls, context, SYSTEM_TOKENS,
                       "You are a coding agent working in a Python repository.", reasoning)
    for _ in range(calls):
        agent.step(clock)
    return Session(name, calls, context, agent.captured, time.perf_counter() - started)


def side_and_compaction(calls: int, context: int, seed: int = 7) -> Session:
    """The main agent, a side agent interleaved from its first quarter on, and one compaction at 2/3."""
    started = time.perf_counter()
    clock = Clock()
    session_id = f"bench-side-{calls}-{context}"
    main = make_agent(seed, session_id, calls, context, SYSTEM_TOKENS,
                      "You are a coding agent working in a Python repository.")
    side = make_agent(seed + 100, session_id, SIDE_CALLS, SIDE_SYSTEM_TOKENS + SIDE_CALLS * 300, SIDE_SYSTEM_TOKENS,
                      "You are an explore sub-agent: find code and report, never edit.")
    side_from, compact_at = calls // 4, (2 * calls) // 3
    for index in range(calls):
        if index == compact_at:
            main.compact()
        main.step(clock)
        if index >= side_from and len(side.captured) < SIDE_CALLS and (index - side_from) % 2 == 0:
            side.step(clock)
    while len(side.captured) < SIDE_CALLS:
        side.step(clock)
    captured = sorted(main.captured + side.captured, key=lambda c: (c.received_at, c.id))
    return Session("side+compaction", calls + SIDE_CALLS, context, captured, time.perf_counter() - started)


# ------------------------------------------------------------------------------------------------
# measuring
# ------------------------------------------------------------------------------------------------
DECODERS: dict[str, Callable[[list[int]], str] | None] = {"none": None, "tokenizer": tokenizer.decode}


@dataclass
class Measure:
    session: Session
    builder: str
    decode: str
    median_s: float
    min_s: float
    peak_bytes: int
    retained_bytes: int
    traces: int
    breaks: int
    trained: int
    trace_tokens: int
    labels: str


def build(session: Session, builder: str, decode: str) -> Trajectory:
    return build_trajectory(session.captured[0].session_id, session.captured, builder=builder,
                            decode=DECODERS[decode])


def measure(session: Session, builder: str, decode: str, repeats: int) -> Measure:
    times = []
    trajectory = None
    for _ in range(repeats):
        trajectory = None
        gc.collect()
        started = time.perf_counter()
        trajectory = build(session, builder, decode)
        times.append(time.perf_counter() - started)
    trajectory = None
    gc.collect()
    tracemalloc.start()
    baseline = tracemalloc.get_traced_memory()[0]
    trajectory = build(session, builder, decode)
    current, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    labels: dict[str, int] = {}
    for trace in trajectory.traces:
        labels[trace.label] = labels.get(trace.label, 0) + 1
    return Measure(session, builder, decode, statistics.median(times), min(times), peak - baseline,
                   current - baseline, len(trajectory.traces), len(trajectory.breaks),
                   sum(t.trained_tokens for t in trajectory.traces),
                   sum(len(t.prompt_ids) + len(t.response_ids) for t in trajectory.traces),
                   " ".join(f"{k}={v}" for k, v in sorted(labels.items())))


def profile(session: Session, builder: str, decode: str, top: int = 12) -> str:
    profiler = cProfile.Profile()
    gc.collect()
    profiler.enable()
    build(session, builder, decode)
    profiler.disable()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("cumulative").print_stats(top)
    out.write("--- by own time ---\n")
    stats.sort_stats("tottime").print_stats(8)
    return out.getvalue()


# ------------------------------------------------------------------------------------------------
# printing
# ------------------------------------------------------------------------------------------------
def table(headers: list[str], rows: list[list[Any]]) -> str:
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))) for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f}"


def mib(size: int) -> str:
    return f"{size / 2**20:.1f}"


def k(tokens: int) -> str:
    return f"{tokens / 1000:.1f}k" if tokens < 10**6 else f"{tokens / 10**6:.2f}M"


def heading(text: str) -> None:
    print(f"\n== {text} ==", flush=True)


def session_row(s: Session) -> list[Any]:
    return [s.name, s.calls, s.context, s.first_prompt, s.max_prompt, k(s.prompt_tokens),
            k(s.response_tokens), k(s.captured_tokens), f"{s.generate_s:.1f}"]


SESSION_HEADERS = ["session", "calls", "context", "first prompt", "max prompt", "prompt tokens", "sampled",
                   "captured", "generate s"]
MEASURE_HEADERS = ["session", "calls", "max prompt", "captured", "builder", "decode", "build ms (median)", "min ms",
                   "peak MiB", "kept MiB", "traces", "breaks", "trained", "in traces", "us / 1k captured"]


def measure_row(m: Measure) -> list[Any]:
    s = m.session
    return [s.name, s.calls, s.max_prompt, k(s.captured_tokens), m.builder, m.decode, ms(m.median_s), ms(m.min_s),
            mib(m.peak_bytes), mib(m.retained_bytes), m.traces, m.breaks, k(m.trained), k(m.trace_tokens),
            f"{m.median_s * 1e6 / (s.captured_tokens / 1000):.1f}"]


def append_only_check(session: Session) -> None:
    """Does the generated session merge into exactly one trace, token for token?"""
    captured = session.captured
    trajectory = build(session, "prefix_merge", "tokenizer")
    exact = sum(1 for prev, cur in zip(captured, captured[1:])
                if cur.prompt_ids[len(prev.prompt_ids):len(prev.prompt_ids) + len(prev.response_ids)] == prev.response_ids)
    print(f"{session.name}: {session.calls} calls, prompts {captured[0].prompt_tokens} -> {session.max_prompt} tokens")
    print(f"prefix_merge (decode=tokenizer): traces={len(trajectory.traces)} breaks={len(trajectory.breaks)} "
          f"status={trajectory.status.value} stats={trajectory.stats}")
    print(f"prompts that are the previous prompt + its sampled ids verbatim: {exact}/{len(captured) - 1} "
          "(the rest re-render the reply differently: judged by decode)")
    if len(trajectory.traces) == 1:
        trace = trajectory.traces[0]
        whole = trace.prompt_ids + trace.response_ids == captured[-1].prompt_ids + captured[-1].response_ids
        print(f"the trace is the last prompt + its reply, token for token: {whole}; "
              f"trained tokens {trace.trained_tokens} == sampled {session.response_tokens}: "
              f"{trace.trained_tokens == session.response_tokens}")
    for brk in trajectory.breaks[:3]:
        print(f"  break at completion {brk.completion_id}: {brk.cause}\n    expected: {brk.expected!r}\n"
              f"    found:    {brk.found!r}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=200, help="calls of the main agent (default 200)")
    parser.add_argument("--context", type=int, default=32768, help="the main agent's last prompt, tokens (default 32768)")
    parser.add_argument("--repeats", type=int, default=5, help="timed builds per measurement (median; default 5)")
    parser.add_argument("--sizes", default="", help="session sizes in calls, comma-separated (default: calls/8,/4,/2,1)")
    parser.add_argument("--contexts", default="", help="contexts for the scaling table (default: context x1,2,4)")
    parser.add_argument("--no-profile", action="store_true",
                        help="skip the cProfile of the slowest prefix_merge build (always run when one is over 1 s)")
    args = parser.parse_args()
    sizes = [int(x) for x in args.sizes.split(",") if x] or sorted({max(2, args.calls // d) for d in (8, 4, 2, 1)})
    contexts = [int(x) for x in args.contexts.split(",") if x] or [args.context, args.context * 2, args.context * 4]
    builders = [("per_request", "none"), ("per_request", "tokenizer"), ("prefix_merge", "none"),
                ("prefix_merge", "tokenizer")]
    started = time.perf_counter()

    heading("setup")
    tokenizer.get_vocab()
    print(f"python {platform.python_version()} on {platform.machine()} {platform.system()}; tokenizer "
          f"{tokenizer.TOKENIZER_NAME}; {args.repeats} timed builds a measurement (median), peak memory from a "
          "separate tracemalloc run; build = build_trajectory (invariant checks included)")

    heading(f"session generation (sim template + tokenizer, seeded)")
    main_session = append_only(args.calls, args.context)
    side_session = side_and_compaction(args.calls, args.context)
    nothink_session = append_only(args.calls, args.context, reasoning=False, name="no-think")
    print(table(SESSION_HEADERS, [session_row(s) for s in (main_session, side_session, nothink_session)]))

    heading("check: the append-only session is one trace")
    append_only_check(main_session)
    append_only_check(nothink_session)

    heading(f"session shapes ({args.calls}-call agent, {args.context}-token context)")
    shape_measures = [measure(s, b, d, args.repeats) for s in (main_session, side_session, nothink_session)
                      for b, d in builders]
    print(table(MEASURE_HEADERS + ["labels"], [measure_row(m) + [m.labels] for m in shape_measures]))
    merged = [m for m in shape_measures if m.builder == "prefix_merge"]
    slow = [m for m in merged if m.median_s > GOAL_SECONDS]
    goal = next(m for m in merged if m.session is main_session and m.decode == "none")
    profiled = slow or ([] if args.no_profile else [goal, max(merged, key=lambda x: x.median_s)])
    profiles = [(m, profile(m.session, "prefix_merge", m.decode)) for m in profiled]
    side_session.release()

    heading(f"scaling with calls (append-only, {args.context}-token context)")
    size_measures = []
    for calls in sizes:
        session = main_session if calls == args.calls else append_only(calls, args.context)
        size_measures.extend(measure(session, b, d, args.repeats) for b, d in builders)
        if session is not main_session:
            session.release()
    print(table(MEASURE_HEADERS, [measure_row(m) for m in size_measures]))

    heading("scaling with calls (no-think: every re-render differs from the sampled tokens; prefix_merge)")
    nothink_measures = []
    for calls in sizes:
        session = nothink_session if calls == args.calls else append_only(calls, args.context, reasoning=False,
                                                                          name="no-think")
        nothink_measures.extend(measure(session, "prefix_merge", d, args.repeats) for d in DECODERS)
        session.release()
    print(table(MEASURE_HEADERS, [measure_row(m) for m in nothink_measures]))

    heading(f"scaling with context (append-only, {args.calls} calls)")
    context_measures = []
    for context in contexts:
        session = main_session if context == args.context else append_only(args.calls, context)
        context_measures.extend(measure(session, b, d, args.repeats) for b, d in builders)
        if session is not main_session:
            session.release()
    print(table(MEASURE_HEADERS, [measure_row(m) for m in context_measures]))
    main_session.release()

    heading("linear in total tokens? fastest build per 1k captured tokens (us), append-only sessions")
    scaled = size_measures + [m for m in context_measures if m.session is not main_session]
    linear = sorted({id(m.session): m.session for m in scaled}.values(), key=lambda s: s.captured_tokens)

    def per_1k(s: Session, b: str, d: str, attr: str = "min_s") -> float:
        m = next(x for x in scaled if x.session is s and x.builder == b and x.decode == d)
        return getattr(m, attr) * 1e6 / (s.captured_tokens / 1000)

    rows = [[s.calls, s.context, k(s.captured_tokens)] + [f"{per_1k(s, b, d):.1f}" for b, d in builders] for s in linear]
    print(table(["calls", "context", "captured"] + [f"{b}/{d}" for b, d in builders], rows))
    span = linear[-1].captured_tokens / linear[0].captured_tokens
    for b, d in builders:
        ratios = [per_1k(s, b, d) for s in linear]
        print(f"{b:>12} decode={d:<9}: {min(ratios):.1f}..{max(ratios):.1f} us per 1k captured tokens "
              f"(max/min {max(ratios) / min(ratios):.2f} over a {span:.0f}x range of captured tokens)")

    for m, text in profiles:
        heading(f"cProfile: prefix_merge decode={m.decode} on {m.session.name} ({m.session.calls} calls, "
                f"{args.context}-token context; median {ms(m.median_s)} ms; goal {GOAL_SECONDS:.0f} s)")
        print(text)

    heading("summary (markdown)")
    print(f"Synthetic sessions on the real Qwen3.5 template and tokenizer: an append-only agent of {args.calls} calls "
          f"whose prompt grows from {main_session.first_prompt} to {main_session.max_prompt} tokens "
          f"({k(main_session.captured_tokens)} captured tokens). Build = `build_trajectory` with its invariant checks; "
          f"median of {args.repeats}; peak from tracemalloc.\n")
    print("| session | builder | decode | build (ms) | peak (MiB) | traces | breaks | trained tokens | tokens in traces |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|")
    for m in shape_measures:
        print(f"| {m.session.name} ({m.session.calls} calls, {k(m.session.captured_tokens)} captured) | {m.builder} | "
              f"{m.decode} | {ms(m.median_s)} | {mib(m.peak_bytes)} | {m.traces} | {m.breaks} | {m.trained:,} | "
              f"{m.trace_tokens:,} |")
    print("\n| calls x context | captured tokens | per_request (ms) | prefix_merge (ms) | prefix_merge + decode (ms) "
          "| prefix_merge us / 1k tokens (fastest run) |")
    print("|---|---:|---:|---:|---:|---:|")
    for s in linear:
        pick = {(x.builder, x.decode): x for x in scaled if x.session is s}
        pm = pick[("prefix_merge", "none")]
        print(f"| {s.calls} x {s.context} | {k(s.captured_tokens)} | {ms(pick[('per_request', 'none')].median_s)} | "
              f"{ms(pm.median_s)} | {ms(pick[('prefix_merge', 'tokenizer')].median_s)} | "
              f"{per_1k(s, 'prefix_merge', 'none'):.1f} |")
    print(f"\n(total run {time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
