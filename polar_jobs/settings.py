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

    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        self.data_dir.mkdir(parents=True, exist_ok=True)
        return f"sqlite:///{self.data_dir / 'polar.db'}"


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """Process-wide settings (read once; tests build their own ``Settings``)."""
    return Settings()
