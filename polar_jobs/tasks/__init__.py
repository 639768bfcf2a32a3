"""The job pipeline: stages init / running / postrun on their own queues, admission, groups, sweeper.

``polar_jobs.tasks.app`` holds the Celery app; the other modules are plain functions of a ``Pipeline``.
"""
