"""Trajectories from captured completions: per_request and prefix_merge builders, checks, trainer exports.

A plain library: no Flask, no Celery.
"""

from polar_jobs.trajectory.build import BUILDERS, build_trajectory
from polar_jobs.trajectory.invariants import InvariantViolation
from polar_jobs.trajectory.trace import ChainBreak, Span, Trace, Trajectory, TrajectoryStatus

__all__ = ["BUILDERS", "ChainBreak", "InvariantViolation", "Span", "Trace", "Trajectory", "TrajectoryStatus",
           "build_trajectory"]
