"""The three stages of a session, as plain functions of the pipeline and a session id.

Each starts with a conditional transition, so a redelivered message finds nothing to do; none
raises: failures end the session (init) or flow into postrun (running), which always builds the
trajectory from what was captured.
"""

from __future__ import annotations

import logging
import tempfile
import time
import traceback
import zlib
from pathlib import Path
from typing import Any

from polar_jobs import jsonio, scoring
from polar_jobs.harnesses import HarnessContext, for_agent
from polar_jobs.scoring import EvaluationContext, EvaluationError, HarnessOutcome
from polar_jobs.schemas import TaskRequest
from polar_jobs.store.jobs import Finished
from polar_jobs.store.models import SessionStatus as S
from polar_jobs.tasks.pipeline import Pipeline
from polar_jobs.trajectory import build_trajectory

log = logging.getLogger(__name__)


def init_stage(pipeline: Pipeline, session_id: str) -> str:
    """Start the runtime, prepare the workspace, pre-warm the evaluator; ``init → ready``."""
    session = pipeline.jobs.session(session_id)
    if session is None or session.status != S.INIT.value:
        return "skipped"
    request = pipeline.jobs.request_of(session.task_id)
    if session.cancel_requested:
        _end(pipeline, session_id, S.CANCELLED, {"reason": "cancelled before init"})
        return "cancelled"
    deadline = time.time() + request.timeout_seconds
    pipeline.jobs.set_values(session_id, deadline_at=deadline)
    runtime = pipeline.runtime(session_id)
    try:
        runtime.start()
        for_agent(request.agent).install()  # once per machine, into a shared cache; not in a running slot
        _prepare_workspace(runtime, request, deadline)
        scoring.create(request.evaluator.name, request.evaluator.config).prepare(runtime)
    except Exception as exc:  # the sample fails; the group goes on
        runtime.stop()
        _end(pipeline, session_id, S.FAILED, {"stage": "init", "error": _describe(exc)})
        return "failed"
    return "ready" if pipeline.jobs.transition(session_id, S.INIT, S.READY) else "skipped"


def _prepare_workspace(runtime, request: TaskRequest, deadline: float) -> None:
    spec = request.runtime
    if spec.repo:
        _must(runtime.exec(["git", "clone", "--quiet", spec.repo, "."], timeout=_left(deadline)), "git clone")
        if spec.commit:
            _must(runtime.exec(["git", "checkout", "--quiet", spec.commit], timeout=_left(deadline)), "git checkout")
    for path, content in spec.files.items():
        _write(runtime, path, content)
    for command in spec.prepare:
        _must(runtime.exec(command, env=spec.env, timeout=_left(deadline)), command)


def _write(runtime, path: str, content: str) -> None:
    """A file into the workspace, through the runtime (so it works for containers too)."""
    with tempfile.NamedTemporaryFile("w", delete=False, encoding="utf-8") as handle:
        handle.write(content)
    try:
        runtime.upload(Path(handle.name), path)
    finally:
        Path(handle.name).unlink(missing_ok=True)


def _must(result, what: str) -> None:
    if not result.ok:
        raise RuntimeError(f"{what} failed (exit {result.exit_code}{', timed out' if result.timed_out else ''}): "
                           f"{(result.stderr or result.stdout).strip()[-500:]}")


def running_stage(pipeline: Pipeline, session_id: str, admit=None) -> str:
    """Run the harness under the remaining budget; ``ready → running → postrun``, whatever happens."""
    if not pipeline.jobs.transition(session_id, S.READY, S.RUNNING):
        return "skipped"
    if admit is not None:
        admit()  # a READY slot just freed up
    session = pipeline.jobs.session(session_id)
    request = pipeline.jobs.request_of(session.task_id)
    runtime = pipeline.runtime(session_id)
    started = time.time()
    if session.cancel_requested:  # cancelled while it waited in READY: postrun ends it, the harness never starts
        outcome = {"exit_code": None, "timed_out": False, "cancelled": True, "duration_s": 0.0}
        pipeline.jobs.transition(session_id, S.RUNNING, S.POSTRUN,
                                 result_json=jsonio.dumps({"harness": outcome}).decode())
        return "postrun"
    try:
        harness = for_agent(request.agent)
        context = HarnessContext(proxy_url=pipeline.settings.proxy_url(), api_key=session.api_key,
                                 model=request.agent.model or "default", session_id=session_id,
                                 task_id=session.task_id, workdir=runtime.workdir, home=runtime.home)
        harness.setup(runtime, context)
        budget = max(0.0, (session.deadline_at or started + request.timeout_seconds) - started)
        if request.agent_timeout:
            budget = min(budget, request.agent_timeout)
        result = runtime.exec(harness.command(request.instruction), env=harness.env(context), timeout=budget,
                              log=runtime.root / "harness.log",
                              should_stop=lambda: _cancel_requested(pipeline, session_id))
        cancelled = _cancel_requested(pipeline, session_id)
        outcome = {"exit_code": None if result.timed_out or cancelled else result.exit_code,
                   "timed_out": result.timed_out, "cancelled": cancelled, "duration_s": result.duration_s,
                   "stdout_tail": result.stdout[-2000:], "stderr_tail": result.stderr[-2000:]}
    except Exception as exc:
        outcome = {"exit_code": None, "timed_out": False, "cancelled": False, "duration_s": time.time() - started,
                   "error": _describe(exc)}
    pipeline.jobs.transition(session_id, S.RUNNING, S.POSTRUN, result_json=jsonio.dumps({"harness": outcome}).decode())
    return "postrun"


def _cancel_requested(pipeline: Pipeline, session_id: str) -> bool:
    session = pipeline.jobs.session(session_id)
    return bool(session and session.cancel_requested)


def postrun_stage(pipeline: Pipeline, session_id: str) -> Finished | None:
    """Build the (possibly partial) trajectory, evaluate, clean up, end the session."""
    session = pipeline.jobs.session(session_id)
    if session is None or session.status != S.POSTRUN.value:
        return None
    request = pipeline.jobs.request_of(session.task_id)
    harness = (jsonio.loads(session.result_json).get("harness") if session.result_json else None) or {
        "exit_code": None, "error": "the running stage was lost (its worker died)"}
    final = _final_status(harness)
    runtime = pipeline.runtime(session_id)
    result: dict[str, Any] = {"harness": harness}
    reward = None
    try:
        trajectory = build_trajectory(session_id, pipeline.captures.load_session(session_id),
                                      builder=request.builder.kind, session_status=final.value,
                                      decode=pipeline.decoder)
        pipeline.jobs.store_trajectory(session_id, trajectory.builder, trajectory.status.value,
                                       zlib.compress(jsonio.dumps(trajectory)))
        result["trajectory"] = {"status": trajectory.status.value, "traces": len(trajectory.traces),
                                "breaks": len(trajectory.breaks), "reasons": trajectory.reasons,
                                "trained_tokens": sum(t.trained_tokens for t in trajectory.traces),
                                "stats": trajectory.stats}
        outcome = HarnessOutcome(exit_code=harness.get("exit_code"), timed_out=bool(harness.get("timed_out")),
                                 duration_s=float(harness.get("duration_s") or 0.0),
                                 error=harness.get("error") or ("cancelled" if harness.get("cancelled") else None))
        evaluator = scoring.create(request.evaluator.name, request.evaluator.config)
        evaluation = scoring.run(evaluator, EvaluationContext(trajectory, runtime, outcome, request.instruction,
                                                              dict(request.metadata)))
        reward = evaluation.reward
        result["evaluation"] = {"reward": evaluation.reward, "trace_rewards": evaluation.trace_rewards,
                                "metrics": evaluation.metrics}
    except EvaluationError as exc:
        result["evaluation_error"] = str(exc)
    except Exception as exc:
        result["postrun_error"] = _describe(exc)
        final = S.FAILED
    finally:
        runtime.stop()
    return _end(pipeline, session_id, final, result, reward)


def _final_status(harness: dict[str, Any]) -> S:
    if harness.get("cancelled"):
        return S.CANCELLED
    if harness.get("timed_out"):
        return S.TIMEOUT
    if harness.get("error") or harness.get("exit_code") != 0:
        return S.FAILED
    return S.DONE


def _end(pipeline: Pipeline, session_id: str, final: S, result: dict[str, Any], reward: float | None = None
         ) -> Finished | None:
    finished = pipeline.jobs.finish(session_id, final, reward=reward, result=result)
    log.info("session %s ended %s (reward %s)", session_id, final.value, reward)
    return finished


def _left(deadline: float) -> float:
    return max(1.0, deadline - time.time())


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}\n{''.join(traceback.format_exception(exc))[-2000:]}"
