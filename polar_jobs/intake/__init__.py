"""The intake API: tasks, sessions, finished groups for trainers, health and metrics."""

from polar_jobs.intake.app import create_intake_app

__all__ = ["create_intake_app"]
