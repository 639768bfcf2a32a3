"""Every Celery setting, in one place, read from the environment (``POLAR_*``, see polar_jobs.settings)."""

from polar_jobs.settings import Settings

_settings = Settings()

broker_url = _settings.broker_url or "redis://127.0.0.1:6379/0"
result_backend = broker_url
task_ignore_result = True
result_expires = 3600

# one queue and one worker pool per stage; the group work rides with postrun
task_routes = {
    "polar_jobs.init": {"queue": "init"},
    "polar_jobs.running": {"queue": "running"},
    "polar_jobs.postrun": {"queue": "postrun"},
    "polar_jobs.finalize_group": {"queue": "postrun"},
    "polar_jobs.callback": {"queue": "postrun"},
    "polar_jobs.sweep": {"queue": "postrun"},
    "polar_jobs.admit": {"queue": "postrun"},
}
task_default_queue = "postrun"

# reserve one message at a time, ack when done; a lost worker is handled by the DB (sweeper), not requeues
task_acks_late = True
worker_prefetch_multiplier = 1
task_reject_on_worker_lost = False
task_acks_on_failure_or_timeout = True
worker_pool = "prefork"
worker_max_tasks_per_child = 200
worker_soft_shutdown_timeout = 30
worker_send_task_events = True
task_send_sent_event = True
broker_connection_retry_on_startup = True

# the visibility timeout above the longest session budget, set in all three places (celery#7651)
visibility_timeout = _settings.visibility_timeout()
broker_transport_options = {"visibility_timeout": visibility_timeout}
result_backend_transport_options = {"visibility_timeout": visibility_timeout}

beat_schedule = {
    "sweep": {"task": "polar_jobs.sweep", "schedule": _settings.sweep_interval_s},
}
