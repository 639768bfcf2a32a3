"""Staged pipeline versus back-to-back sessions: running-slot utilization and orchestration overhead.

    python benchmarks/pipeline.py [--sessions 16] [--concurrency 2] [--init 1.0] [--run 2.0] [--postrun 1.0]
                                  [--configs "1,2,1 0.5,2,0.5 2,2,2"] [--calls 3] [--ready-cap C+2]

Starts ``polar-jobs sim-upstream`` and a ``Stack`` (embedded Redis, intake API, proxy, one Celery worker
per stage queue; the running worker has ``-c C``; ``POLAR_READY_CAP`` = C+2) in a temporary data
directory, all on 127.0.0.1, and for each configuration (I, R, P):

1. **Staged pipeline.** Submits one task of N sessions. Init runs a ``runtime.prepare`` command that
   sleeps I; the harness is ``polar_jobs.harnesses.mini_agent`` making K model calls through the
   capture proxy to the sim (K-1 ``run_shell`` tool calls that sleep, then a final answer; the sim's
   ``delay_ms`` and the tool sleeps add up to about R); postrun's ``output`` evaluator runs a
   ``command`` check that sleeps P (and an answer check, so a reward of 1 proves the session worked).
2. **Baseline, same run.** The same N sessions executed back to back in C threads (slots): each slot
   takes the next session and runs its init command, the same harness command (through the same
   proxy, as an ad-hoc session) and the postrun command, with the same ``LocalRuntime``; no Celery,
   no database transitions, no trajectory build.

Every stage's work is timed from inside the command itself (``$EPOCHREALTIME`` at its first and
last line, written into the workspace) together with ``$PPID``: the Celery pool process that ran it,
i.e. the exact slot. Definitions (printed again with the results):

* running busy time = sum over sessions of (harness end - harness start);
* running phase = first harness start .. last harness end; makespan = submit .. group finalized
  (pipeline), first slot start .. last slot end (baseline);
* running-slot utilization = running busy / (C x running phase); also given over the whole makespan;
* orchestration overhead of a session = (a) init->running handoff: harness start - max(init end, end of
  the previous harness in the same running slot), plus (b) running->postrun handoff: postrun-command
  start - max(harness end, end of the previous postrun command in the same postrun slot), plus (c) the
  finish tail: the session's terminal DB update - postrun-command end. Waiting for a busy slot (the
  READY buffer doing its job) is excluded by the max(); everything else between the end of one
  stage's work and the start of the next (Celery messages, DB transitions, admission, trajectory
  build, process spawns) is counted.

The Celery worker logs (``received`` / ``succeeded in``) split the gaps further (the profile table).
Everything is deterministic; it asserts nothing and exits 0 when the stack ran.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import requests

from polar_jobs.harnesses import HarnessContext, for_agent
from polar_jobs.runtimes import LocalRuntime
from polar_jobs.schemas import AgentSpec
from polar_jobs.settings import Settings
from polar_jobs.stack import Stack, free_port
from polar_jobs.store import make_engine
from polar_jobs.store.jobs import JobStore
from polar_jobs.store.models import SessionStatus
from polar_jobs.store.sessions import SessionStore, new_api_key

INSTRUCTION = "Run the benchmark steps, then report."
FINAL_TEXT = "All benchmark steps done."
GOAL_UTILIZATION = 0.95
GOAL_OVERHEAD_S = 0.050


# ------------------------------------------------------------------------------------------------
# the workload: stamped commands and sim rules
# ------------------------------------------------------------------------------------------------
def stamped(stage: str, body: str) -> str:
    """``body`` between two timestamps (and the parent PID: the pool process, i.e. the slot)."""
    return (f'echo "$EPOCHREALTIME $PPID" > .t_{stage}0; {body}; rc=$?; '
            f'echo "$EPOCHREALTIME" > .t_{stage}1; exit $rc')


def harness_command() -> str:
    return stamped("run", f"{shlex.quote(sys.executable)} -m polar_jobs.harnesses.mini_agent {{instruction}}")


def sim_rules(run_s: float, calls: int) -> list[dict[str, Any]]:
    """K calls: K-1 tool calls that sleep, then the answer; model latency 40 % of R, tools 60 %."""
    delay_ms = round(1000 * 0.4 * run_s / calls)
    tool_s = 0.6 * run_s / max(1, calls - 1)

    def tool_call(step: int) -> dict[str, Any]:
        return {"kind": "tool_call", "name": "run_shell", "delay_ms": delay_ms,
                "arguments": {"command": f"sleep {tool_s:.3f}; echo mark-{step}-end"}}

    rules = [{"match": {"last_role": "user"},
              "policy": tool_call(1) if calls > 1 else {"kind": "text", "text": FINAL_TEXT, "delay_ms": delay_ms}}]
    for step in range(1, calls - 1):
        rules.append({"match": {"last_role": "tool", "contains": f"mark-{step}-end"}, "policy": tool_call(step + 1)})
    if calls > 1:
        rules.append({"match": {"last_role": "tool", "contains": f"mark-{calls - 1}-end"},
                      "policy": {"kind": "text", "text": FINAL_TEXT, "delay_ms": delay_ms}})
    return rules


def task_request(cfg: "Config", sessions: int) -> dict[str, Any]:
    return {"instruction": INSTRUCTION, "num_samples": sessions, "timeout_seconds": 900,
            "runtime": {"prepare": [stamped("init", f"sleep {cfg.init_s}")]},
            "agent": {"harness": "shell", "command": harness_command()},
            "evaluator": {"name": "output", "config": {"checks": [
                {"kind": "command", "command": stamped("post", f"sleep {cfg.postrun_s}")},
                {"kind": "answer_contains", "value": FINAL_TEXT}]}}}


@dataclass(frozen=True)
class Config:
    init_s: float
    run_s: float
    postrun_s: float

    @property
    def label(self) -> str:
        return f"I={self.init_s:g} R={self.run_s:g} P={self.postrun_s:g}"


# ------------------------------------------------------------------------------------------------
# per-session timings
# ------------------------------------------------------------------------------------------------
@dataclass
class Timing:
    session_id: str
    stamps: dict[str, float]  # init0 init1 run0 run1 post0 post1
    slots: dict[str, str]  # init / run / post -> slot id (pool PID, or baseline thread)
    finished: float | None = None  # terminal DB update (pipeline)
    ok: bool = True

    def work(self, stage: str) -> float:
        return self.stamps[f"{stage}1"] - self.stamps[f"{stage}0"]


def read_stamps(workspace: Path) -> tuple[dict[str, float], dict[str, str]]:
    stamps: dict[str, float] = {}
    slots: dict[str, str] = {}
    for stage in ("init", "run", "post"):
        for edge in ("0", "1"):
            words = (workspace / f".t_{stage}{edge}").read_text().split()
            stamps[f"{stage}{edge}"] = float(words[0])
            if edge == "0":
                slots[stage] = words[1]
    return stamps, slots


@dataclass
class Result:
    name: str
    timings: list[Timing]
    concurrency: int
    start: float  # submit (pipeline) / first slot start (baseline)
    end: float  # group finalized (pipeline) / last slot end (baseline)
    rewards: list[float | None] = field(default_factory=list)

    @property
    def makespan(self) -> float:
        return self.end - self.start

    def phase(self) -> tuple[float, float]:
        return min(t.stamps["run0"] for t in self.timings), max(t.stamps["run1"] for t in self.timings)

    def busy(self) -> float:
        return sum(t.work("run") for t in self.timings)

    def utilization(self) -> float:
        first, last = self.phase()
        return self.busy() / (self.concurrency * (last - first))

    def utilization_makespan(self) -> float:
        return self.busy() / (self.concurrency * self.makespan)

    def handoffs(self) -> dict[str, list[float]]:
        """Per session: the three overhead parts (see the module docstring) and raw waits."""
        prev_run = _previous_in_slot(self.timings, "run")
        prev_post = _previous_in_slot(self.timings, "post")
        out: dict[str, list[float]] = {"init_to_run": [], "run_to_post": [], "finish": [], "total": [],
                                       "ready_wait": [], "postrun_wait": []}
        for t in self.timings:
            s = t.stamps
            run_ready = max(s["init1"], prev_run.get(t.session_id, float("-inf")))
            post_ready = max(s["run1"], prev_post.get(t.session_id, float("-inf")))
            a, b = s["run0"] - run_ready, s["post0"] - post_ready
            c = (t.finished - s["post1"]) if t.finished is not None else 0.0
            out["init_to_run"].append(a)
            out["run_to_post"].append(b)
            out["finish"].append(c)
            out["total"].append(a + b + c)
            out["ready_wait"].append(s["run0"] - s["init1"] - a)  # waiting for a running slot (by design)
            out["postrun_wait"].append(s["post0"] - s["run1"] - b)  # waiting for a postrun slot
        return out


def _previous_in_slot(timings: list[Timing], stage: str, key: bool = False) -> dict[str, Any]:
    """session -> end of the work that ran just before it in the same slot of ``stage`` (or its session id)."""
    by_slot: dict[str, list[Timing]] = {}
    for t in timings:
        by_slot.setdefault(t.slots[stage], []).append(t)
    previous: dict[str, float] = {}
    for items in by_slot.values():
        items.sort(key=lambda t: t.stamps[f"{stage}0"])
        for before, after in zip(items, items[1:]):
            previous[after.session_id] = before.session_id if key else before.stamps[f"{stage}1"]
    return previous


# ------------------------------------------------------------------------------------------------
# the staged pipeline
# ------------------------------------------------------------------------------------------------
def run_pipeline(api: str, jobs: JobStore, settings: Settings, cfg: Config, sessions: int, concurrency: int,
                 timeout_s: float) -> tuple[Result, str]:
    response = requests.post(f"{api}/v1/tasks", json=task_request(cfg, sessions), timeout=30)
    response.raise_for_status()
    task_id = response.json()["task_id"]
    deadline = time.time() + timeout_s
    while True:
        task = jobs.task(task_id)
        if task is not None and task.status == "finalized":
            break
        if time.time() > deadline:
            raise RuntimeError(f"task {task_id} did not finalize within {timeout_s:.0f} s: "
                               f"{requests.get(f'{api}/v1/tasks/{task_id}', timeout=10).json()['counts']}")
        time.sleep(0.2)
    timings, rewards = [], []
    for session in jobs.sessions_of(task_id):
        workspace = settings.sessions_dir() / session.id / "workspace"
        try:
            stamps, slots = read_stamps(workspace)
        except (OSError, ValueError, IndexError) as exc:
            raise RuntimeError(f"session {session.id} ({session.status}) left no timestamps: {exc}; "
                               f"result {session.result_json and session.result_json[:800]}") from None
        timings.append(Timing(session.id, stamps, slots, finished=session.updated_at,
                              ok=session.status == SessionStatus.DONE.value))
        rewards.append(session.reward)
    return Result("pipeline", timings, concurrency, task.created_at, task.finalized_at, rewards), task_id


# ------------------------------------------------------------------------------------------------
# the baseline: back to back in C slots, no orchestration
# ------------------------------------------------------------------------------------------------
def run_baseline(root: Path, proxy_url: str, sessions_store: SessionStore, cfg: Config, sessions: int,
                 concurrency: int) -> Result:
    request = task_request(cfg, sessions)
    agent = AgentSpec.model_validate(request["agent"])
    harness = for_agent(agent)
    init_cmd = request["runtime"]["prepare"][0]
    post_cmd = request["evaluator"]["config"]["checks"][0]["command"]
    todo: queue.Queue[str] = queue.Queue()
    keys: dict[str, str] = {}
    for _ in range(sessions):
        key = new_api_key()
        row = sessions_store.create(api_key=key, kind="adhoc", status=SessionStatus.RUNNING)
        keys[row.id] = key
        todo.put(row.id)
    timings: list[Timing] = []
    errors: list[str] = []
    lock = threading.Lock()

    def slot(index: int) -> None:
        while True:
            try:
                session_id = todo.get_nowait()
            except queue.Empty:
                return
            runtime = LocalRuntime(root, session_id)
            runtime.start()
            context = HarnessContext(proxy_url=proxy_url, api_key=keys[session_id], model="default",
                                     session_id=session_id, task_id="baseline", workdir=runtime.workdir,
                                     home=runtime.home)
            results = [runtime.exec(init_cmd, timeout=600),
                       runtime.exec(harness.command(INSTRUCTION), env=harness.env(context), timeout=600,
                                    log=runtime.root / "harness.log"),
                       runtime.exec(["bash", "-lc", post_cmd], timeout=600)]
            stamps, _ = read_stamps(Path(runtime.workdir))
            with lock:
                if not all(r.ok for r in results):
                    errors.append(f"{session_id}: {[(r.exit_code, r.stderr[-300:]) for r in results]}")
                timings.append(Timing(session_id, stamps, {s: f"thread-{index}" for s in ("init", "run", "post")},
                                      ok=all(r.ok for r in results)))

    start = time.time()
    threads = [threading.Thread(target=slot, args=(i,), name=f"baseline-{i}") for i in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    end = time.time()
    if errors:
        print("baseline errors:", *errors[:3], sep="\n  ")
    return Result("baseline", timings, concurrency, start, end)


# ------------------------------------------------------------------------------------------------
# profile from the Celery worker logs
# ------------------------------------------------------------------------------------------------
_LOG_LINE = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}): \w+/([\w-]+)\] Task (polar_jobs\.\w+)\[([\w:-]+)\] "
                       r"(received|succeeded in ([\d.e-]+)s)")


@dataclass
class StageRun:
    name: str
    process: str = ""  # ForkPoolWorker-N of the worker that ran it
    received: float | None = None
    started: float | None = None
    ended: float | None = None


def parse_worker_logs(log_dir: Path, since: float) -> list[StageRun]:
    runs: dict[str, StageRun] = {}
    for log in sorted(log_dir.glob("worker-*.log")):
        for line in log.read_text(errors="replace").splitlines():
            match = _LOG_LINE.match(line)
            if not match:
                continue
            at = datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
            if at < since - 1:
                continue
            run = runs.setdefault(match.group(4), StageRun(match.group(3)))
            if match.group(5) == "received":
                run.received = at
            else:
                run.ended, run.started, run.process = at, at - float(match.group(6)), match.group(2)
    return [r for r in runs.values() if r.started is not None and r.received is not None]


def match_stage_runs(timings: list[Timing], stage_runs: list[StageRun]) -> dict[tuple[str, str], StageRun]:
    """(session, stage) -> the Celery task run that contained that stage's command.

    A slot is known twice: as the command's parent PID and as the log's ForkPoolWorker-N; each PID is
    paired with the pool process whose task runs contain most of its commands, then every command is
    matched inside its own pool process (whose runs are sequential, so the match is unique)."""
    task_of = {"init": "polar_jobs.init", "run": "polar_jobs.running", "post": "polar_jobs.postrun"}
    slack = 0.002  # log timestamps have 1 ms resolution
    found: dict[tuple[str, str], StageRun] = {}
    for stage, task in task_of.items():
        by_process: dict[str, list[StageRun]] = {}
        for r in stage_runs:
            if r.name == task:
                by_process.setdefault(r.process, []).append(r)

        def inside(t: Timing, runs: list[StageRun]) -> StageRun | None:
            t0, t1 = t.stamps[f"{stage}0"], t.stamps[f"{stage}1"]
            return next((r for r in runs if r.started - slack <= t0 and t1 <= r.ended + slack), None)

        pids = sorted({t.slots[stage] for t in timings})
        scores = sorted(((sum(inside(t, runs) is not None for t in timings if t.slots[stage] == pid), pid, proc)
                         for pid in pids for proc, runs in by_process.items()), reverse=True)
        pairing: dict[str, str] = {}
        for score, pid, proc in scores:
            if score and pid not in pairing and proc not in pairing.values():
                pairing[pid] = proc
        for t in timings:
            proc = pairing.get(t.slots[stage])
            run = inside(t, by_process.get(proc, [])) if proc else None
            if run is not None:
                found[(t.session_id, stage)] = run
    return found


def profile(result: Result, stage_runs: list[StageRun]) -> list[list[Any]] | None:
    """Where the handoff time goes, from the Celery worker logs (received / succeeded in), per session."""
    found = match_stage_runs(result.timings, stage_runs)
    by_id = {t.session_id: t for t in result.timings}
    prev_run = _previous_in_slot(result.timings, "run", key=True)
    parts: dict[str, list[float]] = {}

    def add(key: str, value: float) -> None:
        parts.setdefault(key, []).append(value)

    for t in result.timings:
        s = t.stamps
        init, run, post = (found.get((t.session_id, stage)) for stage in ("init", "run", "post"))
        if not (init and run and post):
            continue
        previous = by_id.get(prev_run.get(t.session_id, ""))
        add("init: stage start -> init command start (reads, runtime, spawn)", s["init0"] - init.started)
        add("init: init command end -> stage end (evaluator prepare, ->ready)", init.ended - s["init1"])
        before = found.get((previous.session_id, "run")) if previous else None
        if previous is not None and previous.stamps["run1"] > s["init1"] and before is not None:
            # the running slot was the limit: the slot's turnover
            add("[slot busy] previous harness end -> previous running stage end",
                before.ended - previous.stamps["run1"])
            add("[slot busy] previous running stage end -> message received", run.received - before.ended)
            add("[slot busy] message received -> running stage start", run.started - run.received)
        else:
            # the session was the limit: the handoff from init
            add("[slot idle] init stage end -> running message received", run.received - init.ended)
            add("[slot idle] message received -> running stage start", run.started - run.received)
        add("running: stage start -> harness start (->running, admit, reads, spawn)", s["run0"] - run.started)
        add("running: harness end -> stage end (->postrun, chain next)", run.ended - s["run1"])
        add("postrun: running stage end -> postrun message received", post.received - run.ended)
        add("postrun: received -> stage start", post.started - post.received)
        add("postrun: stage start -> check command start (trajectory build, evaluator)", s["post0"] - post.started)
        add("postrun: check command end -> terminal DB update", (t.finished or post.ended) - s["post1"])
        add("postrun: terminal DB update -> stage end (admit)", post.ended - (t.finished or post.ended))
    if not parts:
        return None
    return [[key, len(v), f"{1000 * statistics.mean(v):.1f}", f"{1000 * statistics.median(v):.1f}",
             f"{1000 * max(v):.1f}"] for key, v in parts.items()]


def micro_costs(jobs: JobStore, sessions_store: SessionStore, settings: Settings, upstream_url: str, task_id: str,
                root: Path, repeat: int = 30) -> list[list[Any]]:
    """What the steps inside a handoff cost on their own, timed from this process on the idle stack."""
    import redis
    from celery import chain
    from kombu import Queue

    from polar_jobs.tasks.admission import LOCK_NAME

    broker_url = settings.broker_url
    traced_session = next((t.id for t in jobs.sessions_of(task_id) if t.status == SessionStatus.DONE.value), None)
    client = redis.Redis.from_url(broker_url)
    probe = sessions_store.create(kind="adhoc", status=SessionStatus.RUNNING)
    runtime = LocalRuntime(root, "micro")
    runtime.start()

    def admission_count() -> None:  # what admit() does when the buffer is full: lock, count, unlock
        with client.lock(LOCK_NAME, timeout=30, blocking_timeout=10):
            jobs.claim_for_init(0)

    from kombu import Connection

    from polar_jobs.tasks.app import init, postrun, running  # noqa: F401 - the chain admission builds

    micro_queue = f"bench-micro-{uuid.uuid4().hex[:8]}"
    connection = Connection(broker_url)
    producer = connection.Producer()

    def publish() -> None:  # what start_session does: build the chain, publish its first message
        signature = chain(init.si("micro"), running.si("micro"), postrun.si("micro"))
        message = {"task": "polar_jobs.init", "args": ["micro"], "chain": [dict(t) for t in signature.tasks[1:]]}
        producer.publish(message, routing_key=micro_queue, declare=[Queue(micro_queue)], serializer="json")

    steps = [("one DB write (conditional UPDATE + commit)", lambda: jobs.set_values(probe.id, policy_version=1)),
             ("session read + task request parse", lambda: (jobs.session(probe.id), jobs.request_of(task_id))),
             ("admission with a full buffer (Redis lock, count)", admission_count),
             ("build a stage chain + publish one message (kombu, Redis)", publish),
             ("bash -lc spawn (LocalRuntime.exec 'true')", lambda: runtime.exec("true"))]
    if traced_session:  # postrun's first step, on a real session of the last configuration
        from polar_jobs.store import CaptureStore
        from polar_jobs.tasks.pipeline import Pipeline
        from polar_jobs.trajectory import build_trajectory

        captures, decoder = CaptureStore(jobs.engine), Pipeline(settings.model_copy(update={
            "upstream_url": upstream_url})).decoder  # the workers' decoder: the sim's /detokenize
        steps += [("postrun: load captures", lambda: captures.load_session(traced_session)),
                  ("postrun: load + build trajectory, no decoder", lambda: build_trajectory(
                      traced_session, captures.load_session(traced_session), session_status="done")),
                  ("postrun: load + build trajectory, upstream decoder", lambda: build_trajectory(
                      traced_session, captures.load_session(traced_session), session_status="done",
                      decode=decoder))]
    rows = []
    for name, step in steps:
        step()
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            step()
            times.append(time.perf_counter() - t0)
        rows.append([name, f"{1000 * statistics.mean(times):.2f}", f"{1000 * statistics.median(times):.2f}"])
    client.delete(micro_queue)
    connection.release()
    return rows


# ------------------------------------------------------------------------------------------------
# printing
# ------------------------------------------------------------------------------------------------
def table(headers: list[str], rows: list[list[Any]], title: str | None = None) -> None:
    if title:
        print(f"\n{title}")
    cells = [[str(c) for c in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for n, row in enumerate(cells):
        print("  " + "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))))
        if n == 0:
            print("  " + "  ".join("-" * w for w in widths))


def ms(values: list[float]) -> str:
    return f"{1000 * statistics.mean(values):.1f}"


def report(cfg: Config, pipe: Result, base: Result, sessions: int, concurrency: int, ready_cap: int,
           stage_runs: list[StageRun]) -> dict[str, Any]:
    rounds = -(-sessions // concurrency)
    ideal_pipe = cfg.init_s + rounds * cfg.run_s + cfg.postrun_s
    ideal_base = rounds * (cfg.init_s + cfg.run_s + cfg.postrun_s)
    rows = []
    for name, get in [
        ("sessions ok (reward 1.0)", lambda r: f"{sum(t.ok for t in r.timings)}/{len(r.timings)}"
         + (f" ({sum(1 for x in r.rewards if x == 1.0)})" if r.rewards else "")),
        ("makespan s", lambda r: f"{r.makespan:.2f}"),
        ("running phase s", lambda r: f"{r.phase()[1] - r.phase()[0]:.2f}"),
        ("running busy s (sum)", lambda r: f"{r.busy():.2f}"),
        ("mean init / run / postrun work s", lambda r: " / ".join(
            f"{statistics.mean(t.work(s) for t in r.timings):.3f}" for s in ("init", "run", "post"))),
        ("running-slot utilization (phase)", lambda r: f"{100 * r.utilization():.1f}%"),
        ("running-slot utilization (makespan)", lambda r: f"{100 * r.utilization_makespan():.1f}%"),
        ("overhead per session ms (mean)", lambda r: ms(r.handoffs()["total"])),
        ("  init->running handoff ms", lambda r: ms(r.handoffs()["init_to_run"])),
        ("  running->postrun handoff ms", lambda r: ms(r.handoffs()["run_to_post"])),
        ("  finish tail ms", lambda r: ms(r.handoffs()["finish"])),
        ("overhead per session ms (p50 / max)", lambda r: "{:.1f} / {:.1f}".format(
            1000 * statistics.median(r.handoffs()["total"]), 1000 * max(r.handoffs()["total"]))),
        ("ready-buffer wait s (mean, by design)", lambda r: f"{statistics.mean(r.handoffs()['ready_wait']):.2f}"),
    ]:
        rows.append([name, get(pipe), get(base)])
    rows.append(["ideal makespan s", f"{ideal_pipe:.2f}", f"{ideal_base:.2f}"])
    table(["metric", "pipeline", "baseline"], rows,
          f"== {cfg.label}  N={sessions} C={concurrency} ready_cap={ready_cap}")
    speedup = base.makespan / pipe.makespan
    util = pipe.utilization()
    overhead = statistics.mean(pipe.handoffs()["total"])
    base_overhead = statistics.mean(base.handoffs()["total"])
    goal_util = util >= GOAL_UTILIZATION if cfg.init_s <= cfg.run_s else None
    goal_over = overhead < GOAL_OVERHEAD_S
    print(f"  makespan ratio baseline/pipeline: {speedup:.2f}x")
    print(f"  goal utilization >= {GOAL_UTILIZATION:.0%} (I <= R): "
          + ("n/a (I > R)" if goal_util is None else ("HOLDS" if goal_util else "FAILS")) + f" ({100 * util:.1f}%)")
    print(f"  goal overhead < {1000 * GOAL_OVERHEAD_S:.0f} ms/session: {'HOLDS' if goal_over else 'FAILS'} "
          f"({1000 * overhead:.1f} ms; {1000 * (overhead - base_overhead):.1f} ms beyond the baseline's own "
          f"{1000 * base_overhead:.1f} ms of process spawns)")
    prof = profile(pipe, stage_runs)
    if prof:
        table(["pipeline profile (Celery worker logs, 1 ms)", "n", "mean ms", "p50 ms", "max ms"], prof)
        print("  (a stage's end is its 'succeeded' log line, written after the chain's next message was sent, so\n"
              "   'stage end -> message received' can be slightly negative; [slot busy] rows are a running slot's\n"
              "   turnover when the next session was already READY, [slot idle] rows the init->running handoff)")
    return {"cfg": cfg, "pipe": pipe, "base": base, "speedup": speedup, "util": util, "overhead": overhead,
            "goal_util": goal_util, "goal_over": goal_over, "net": overhead - base_overhead}


def summary(rows: list[dict[str, Any]], sessions: int, concurrency: int) -> None:
    print(f"\n## Pipeline benchmark (N={sessions} sessions, C={concurrency} running slots)\n")
    print("| I / R / P (s) | pipeline makespan | baseline makespan | speedup | running util (pipeline) "
          "| running util (baseline, makespan) | overhead / session (beyond baseline) | goals |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for r in rows:
        cfg = r["cfg"]
        goals = [("util " + ("n/a" if r["goal_util"] is None else ("ok" if r["goal_util"] else "MISSED"))),
                 "overhead " + ("ok" if r["goal_over"] else "MISSED")]
        print(f"| {cfg.init_s:g} / {cfg.run_s:g} / {cfg.postrun_s:g} | {r['pipe'].makespan:.2f} s "
              f"| {r['base'].makespan:.2f} s | {r['speedup']:.2f}x | {100 * r['util']:.1f}% "
              f"| {100 * r['base'].utilization_makespan():.1f}% | {1000 * r['overhead']:.1f} ms "
              f"({1000 * r['net']:.1f} ms) | {', '.join(goals)} |")
    print(f"\nGoals: running-slot utilization >= {GOAL_UTILIZATION:.0%} when I <= R; orchestration overhead "
          f"< {1000 * GOAL_OVERHEAD_S:.0f} ms per session.")


DEFINITIONS = """Definitions (all times measured inside the stage commands with $EPOCHREALTIME; slot = the pool
process that ran the command, from $PPID; baseline slot = its thread):
  running busy         = sum over sessions of (harness end - harness start)
  running phase        = first harness start .. last harness end
  utilization (phase)  = running busy / (C x running phase);  (makespan) = running busy / (C x makespan)
  makespan             = pipeline: task submit .. group finalized;  baseline: slots start .. last slot end
  overhead per session = (harness start - max(init end, previous harness end in the same running slot))
                       + (postrun command start - max(harness end, previous postrun command end in its slot))
                       + (terminal DB update - postrun command end)
                         i.e. all wall time between one stage's work and the next stage's work that is not
                         spent waiting for a busy slot (the READY buffer's wait is reported separately)."""


# ------------------------------------------------------------------------------------------------
def parse_configs(args: argparse.Namespace) -> list[Config]:
    if any(v is not None for v in (args.init, args.run, args.postrun)):
        return [Config(args.init if args.init is not None else 1.0, args.run if args.run is not None else 2.0,
                       args.postrun if args.postrun is not None else 1.0)]
    configs = []
    for item in args.configs.split():
        i, r, p = (float(x) for x in item.split(","))
        configs.append(Config(i, r, p))
    return configs


def wait_http(url: str, seconds: float = 60) -> None:
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            requests.get(url, timeout=2)
            return
        except requests.RequestException:
            time.sleep(0.2)
    raise RuntimeError(f"{url} did not answer within {seconds} s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=16)
    parser.add_argument("--concurrency", type=int, default=2, help="running slots C (the running worker's -c)")
    parser.add_argument("--init", type=float, default=None, help="init time I (s); with --run/--postrun: one config")
    parser.add_argument("--run", type=float, default=None, help="run time R (s)")
    parser.add_argument("--postrun", type=float, default=None, help="postrun time P (s)")
    parser.add_argument("--configs", default="1,2,1 0.5,2,0.5 2,2,2",
                        help="space-separated I,R,P triples, used unless --init/--run/--postrun is given")
    parser.add_argument("--calls", type=int, default=3, help="model calls per harness run")
    parser.add_argument("--ready-cap", type=int, default=None, help="POLAR_READY_CAP (default C+2)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary data directory")
    args = parser.parse_args()
    configs = parse_configs(args)
    concurrency, sessions = args.concurrency, args.sessions
    ready_cap = args.ready_cap or concurrency + 2

    data_dir = Path(tempfile.mkdtemp(prefix="polar-bench-pipeline-"))
    os.environ["POLAR_READY_CAP"] = str(ready_cap)
    os.environ["POLAR_DATA_DIR"] = str(data_dir)
    sim_port = free_port()
    sim_log = open(data_dir / "sim.log", "ab")
    sim = subprocess.Popen([sys.executable, "-m", "polar_jobs.cli", "sim-upstream", "--port", str(sim_port)],
                           stdout=sim_log, stderr=subprocess.STDOUT, start_new_session=True)
    sim_url = f"http://127.0.0.1:{sim_port}"
    settings = Settings(data_dir=data_dir, api_port=free_port(), proxy_port=free_port(), ready_cap=ready_cap)
    stack = Stack(settings, upstream=sim_url, running_concurrency=concurrency)
    print(f"polar-jobs pipeline benchmark: N={sessions} sessions, C={concurrency} running slots, "
          f"ready_cap={ready_cap}, init/postrun worker slots 2/2, {args.calls} model calls per run; "
          f"{os.cpu_count()} CPUs, Python {sys.version.split()[0]}, load average {os.getloadavg()[0]:.2f} at start")
    print(DEFINITIONS)
    rows = []
    try:
        wait_http(f"{sim_url}/v1/models")
        stack.start()
        api = f"http://127.0.0.1:{settings.api_port}"
        wait_http(f"{api}/healthz")
        engine = make_engine(stack.settings.resolved_database_url())
        jobs, sessions_store = JobStore(engine), SessionStore(engine)
        # warm-up: one session end to end, so every worker has imported and connected
        requests.post(f"{sim_url}/sim/rules?replace=1", json=sim_rules(0.2, args.calls), timeout=10).raise_for_status()
        time.sleep(3)  # workers boot
        warm, _ = run_pipeline(api, jobs, stack.settings, Config(0.05, 0.2, 0.05), 2 * concurrency, concurrency,
                               timeout_s=120)
        # the harness's fixed cost (bash, Python start, K proxy round trips) comes off the scripted time
        calibration = run_baseline(data_dir / "calibration", settings.proxy_url(), sessions_store,
                                   Config(0.0, 0.2, 0.0), 3 * concurrency, concurrency)
        fixed = max(0.0, statistics.median(t.work("run") for t in calibration.timings) - 0.2)
        print(f"\nwarm-up: {sum(t.ok for t in warm.timings)}/{len(warm.timings)} pipeline sessions ok; harness fixed "
              f"cost (bash, interpreter start, {args.calls} proxy round trips; median of "
              f"{len(calibration.timings)} runs, {concurrency} at a time) "
              f"{1000 * fixed:.0f} ms, taken off the scripted model+tool time so that a run lasts about R")
        for cfg in configs:
            scripted = max(0.2 * cfg.run_s, cfg.run_s - fixed)
            requests.post(f"{sim_url}/sim/rules?replace=1", json=sim_rules(scripted, args.calls),
                          timeout=10).raise_for_status()
            since = time.time()
            budget = 120 + 3 * sessions * (cfg.init_s + cfg.run_s + cfg.postrun_s)
            pipe, task_id = run_pipeline(api, jobs, stack.settings, cfg, sessions, concurrency, timeout_s=budget)
            time.sleep(0.5)  # let the worker logs flush
            stage_runs = parse_worker_logs(stack.log_dir, since)
            base = run_baseline(data_dir / "baseline", settings.proxy_url(), sessions_store, cfg, sessions,
                                concurrency)
            rows.append(report(cfg, pipe, base, sessions, concurrency, ready_cap, stage_runs))
        table(["step inside a handoff (timed alone, idle stack)", "mean ms", "p50 ms"],
              micro_costs(jobs, sessions_store, stack.settings, sim_url, task_id, data_dir / "micro"),
              "Micro costs (from the benchmark process; the workers pay about the same):")
    finally:
        stack.stop()
        if sim.poll() is None:
            os.killpg(sim.pid, 15)
            try:
                sim.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(sim.pid, 9)
        for log in sorted((data_dir / "logs").glob("*.log")):
            text = log.read_text(errors="replace")
            if "Traceback" in text:
                print(f"== {log.name} has a traceback:\n{text[text.index('Traceback'):][:2000]}")
        if args.keep:
            print(f"data kept in {data_dir}")
        else:
            import shutil

            shutil.rmtree(data_dir, ignore_errors=True)
    if rows:
        summary(rows, sessions, concurrency)
        print(f"(load average {os.getloadavg()[0]:.2f} at the end: other processes on this machine add noise)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
