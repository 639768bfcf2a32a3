"""Typed settings, read once from ``POLAR_*`` environment variables, with single-machine defaults."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


def _default_data_dir() -> Path:
    return Path.home() / ".local" / "share" / "polar-jobs"


class Settings(BaseSettings):
    """Everything configurable, each field overridable as ``POLAR_<FIELD>``."""

    model_config = SettingsConfigDict(env_prefix="POLAR_", extra="ignore")

    data_dir: Path = Field(default_factory=_default_data_dir)
    """Where the SQLite database, logs and caches live on one machine."""

    database_url: str | None = None
    """SQLAlchemy URL; default ``sqlite:///<data_dir>/polar.db``. PostgreSQL on a farm."""

    upstream_url: str = "http://127.0.0.1:8000"
    """The vLLM-style engine every model call is served by (OpenAI Chat Completions)."""

    served_model: str | None = None
    """Model name sent upstream; default: the first model the upstream's /v1/models lists."""

    proxy_host: str = "127.0.0.1"
    proxy_port: int = 8080

    open_capture: bool = False
    """Open capture mode: each unknown API key opens an ad-hoc session instead of a 401."""

    upstream_timeout_s: float = 600.0
    """Seconds one upstream call may take before it is recorded failed (read timeout)."""

    upstream_connect_timeout_s: float = 5.0

    default_max_tokens: int = 4096
    """Used when an Anthropic request omits max_tokens."""

    force_disable_thinking_for: tuple[str, ...] = ("qwen3.5",)
    """Served-model name fragments whose chat templates need ``enable_thinking=False``."""

    allow_untokenized: bool = False
    """Accept an upstream that returns no token ids (captures are marked untrainable)."""

    # -- the job pipeline ----------------------------------------------------------------------
    broker_url: str | None = None
    """Redis URL for Celery; ``polar-jobs up`` starts an embedded Redis when it is not set."""

    api_host: str = "127.0.0.1"
    api_port: int = 8090
    api_token: str | None = None
    """Bearer token the intake API requires, when set."""

    proxy_public_url: str | None = None
    """The proxy's URL as harnesses reach it; default ``http://<proxy_host>:<proxy_port>``."""

    ready_cap: int = 4
    """READY buffer bound: sessions in init or ready (prepared, waiting for a running slot) at most."""

    max_session_seconds: float = 4 * 3600
    """The longest session budget intake accepts; the broker's visibility timeout is set above it."""

    sweep_interval_s: float = 5.0
    sweep_grace_s: float = 30.0
    """How long past its budget a running session may go before the sweeper closes it."""

    keep_session_files: bool = True
    callback_secret: str = "polar-jobs-dev-secret"
    """HMAC-SHA256 key for signing callback POSTs (set your own on a farm)."""

    advantage_method: str = "grpo"
    trajectory_decoder: str = "upstream"
    """What judges re-rendered history in postrun: the upstream's /detokenize, 'qwen3.5', or 'none'."""

    def proxy_url(self) -> str:
        return (self.proxy_public_url or f"http://{self.proxy_host}:{self.proxy_port}").rstrip("/")

    def sessions_dir(self) -> Path:
        return self.data_dir / "sessions"

    def visibility_timeout(self) -> int:
        """Above the longest session budget, so a running message is never redelivered while it runs."""
        return int(2 * self.max_session_seconds + 600)

    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        self.data_dir.mkdir(parents=True, exist_ok=True)
        return f"sqlite:///{self.data_dir / 'polar.db'}"


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """Process-wide settings (read once; tests build their own ``Settings``)."""
    return Settings()
