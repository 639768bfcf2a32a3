"""``polar-jobs export``: captured sessions → trajectories → a trainer's JSONL (the CLI's glue)."""

from __future__ import annotations

import sys
from contextlib import nullcontext
from typing import Any, Iterator

from polar_jobs import jsonio
from polar_jobs.settings import Settings
from polar_jobs.store import CaptureStore, SessionStore, make_engine
from polar_jobs.trajectory import Trajectory, build_trajectory
from polar_jobs.trajectory.exports import sft_records, skyrl_output, slime_samples, verl_rows
from polar_jobs.trajectory.rerender import Decoder


def make_decoder(kind: str, settings: Settings) -> Decoder | None:
    if kind == "none":
        return None
    if kind == "upstream":
        from polar_jobs.proxy.upstream import UpstreamClient

        return UpstreamClient(settings.upstream_url, served_model=settings.served_model).detokenize
    from polar_jobs.sim.tokenizer import decode

    return decode


def export_sessions(settings: Settings, *, fmt: str, session_ids: list[str], out: str, builder: str,
                    max_tokens: int | None, reward: float | None, decoder: str) -> dict[str, int]:
    engine = make_engine(settings.resolved_database_url())
    captures, sessions = CaptureStore(engine), SessionStore(engine)
    decode = make_decoder(decoder, settings)
    trajectories = []
    for session_id in session_ids or captures.session_ids():
        session = sessions.get(session_id)
        trajectories.append(build_trajectory(session_id, captures.load_session(session_id), builder=builder,
                                             session_status=session.status if session else None, decode=decode,
                                             rollout_id=session_id))
    rows = list(_rows(fmt, trajectories, reward, max_tokens))
    with (nullcontext(sys.stdout) if out == "-" else open(out, "w", encoding="utf-8")) as stream:
        for row in rows:
            stream.write(jsonio.dumps(row).decode() + "\n")
    return {"rows": len(rows), "sessions": len(trajectories), "traces": sum(len(t.traces) for t in trajectories),
            "breaks": sum(len(t.breaks) for t in trajectories)}


def _rows(fmt: str, trajectories: list[Trajectory], reward: float | None, max_tokens: int | None
          ) -> Iterator[dict[str, Any]]:
    if fmt == "skyrl":  # one GeneratorOutput for the whole batch
        yield skyrl_output(((t, reward, t.rollout_id, 0) for t in trajectories), max_tokens=max_tokens)
        return
    start = 0
    for group, trajectory in enumerate(trajectories):
        if fmt == "slime":
            rows = slime_samples(trajectory, reward, group_index=group, start_index=start, max_tokens=max_tokens)
        elif fmt == "verl":
            rows = verl_rows(trajectory, reward, max_tokens=max_tokens)
        else:
            rows = sft_records(trajectory, max_tokens=max_tokens)
        start += len(rows)
        yield from rows
