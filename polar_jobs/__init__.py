"""polar_jobs: run coding-agent harnesses unmodified and capture every model call token by token."""

__version__ = "0.1.0"
