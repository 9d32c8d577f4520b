"""Settings: environment variables prefixed BOUNDARY_, read when the app is built.

Nothing reads settings at import time; `create_app(settings)` takes them, so every test
builds an app with its own.
"""

from __future__ import annotations

from functools import lru_cache
from os import PathLike
from pathlib import Path

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from app.store.url import BadDatabaseSetting, parse_db
from workers.catalog.exported import MAX_EXPORT_BYTES
from workers.catalog.job_limit import host_job_bytes

REPO_ROOT = Path(__file__).resolve().parent.parent
MIN_TOKEN_CHARS = 16


class Settings(BaseSettings):
    """Everything an operator can configure. Each field is the variable BOUNDARY_<NAME>."""

    model_config = SettingsConfigDict(env_prefix="BOUNDARY_", extra="ignore", frozen=True)

    DB: str = Field(
        default=str(REPO_ROOT / "var" / "boundary.sqlite3"),
        description="The store: a SQLite file path, or postgresql://user@host:port/database.",
    )
    DB_TIMEOUT_S: float = Field(
        default=5.0,
        gt=0,
        le=60,
        description="PostgreSQL: the longest wait to connect, for a pooled connection or a lock.",
    )
    DB_STATEMENT_TIMEOUT_S: float = Field(
        default=15.0, gt=0, le=600, description="PostgreSQL: the longest one statement may run."
    )
    DB_POOL_SIZE: int = Field(
        default=4, ge=2, le=64, description="PostgreSQL: connections each replica may hold."
    )
    DB_SYNCHRONOUS_COMMIT: bool = Field(
        default=False,
        description="PostgreSQL: wait for every commit to reach disk (off: like SQLite's "
        "synchronous=NORMAL, a crash of the database host may lose the last commits).",
    )
    WORKER_TOKEN: str | None = Field(
        default=None, description="Shared by `serve` and `worker`; `serve` makes one when unset."
    )
    SUBMIT_TOKEN: str | None = Field(
        default=None, description="When set, job submission needs it as a bearer token."
    )
    PUBLIC_BASE_URL: str | None = Field(
        default=None, description="The site's public origin, e.g. https://boundary.example.org."
    )
    FRAME_ANCESTORS: str = Field(
        default="*", description="CSP frame-ancestors for /embed/ routes; others are 'self'."
    )
    CONTENT_DIR: Path = Field(default=REPO_ROOT / "app" / "content")
    CACHE_DIR: Path = Field(
        default=Path.home() / ".cache" / "boundary" / "jax",
        description="JAX persistent compilation cache for the `persistent` cache policy.",
    )
    MAX_JOB_BYTES: int = Field(
        default_factory=host_job_bytes,
        ge=1,
        description="The most host memory a job's estimated peak may need; unset: half of "
        "this host's memory (its control group's limit where less), at least 2 GiB.",
    )
    QUEUE_TIMEOUT_S: float = Field(default=600.0, gt=0, description="Queued longer: expired.")
    LEASE_S: float = Field(default=30.0, gt=0, le=30, description="A lease's deadline.")
    MAX_ATTEMPTS: int = Field(default=3, ge=1, description="Leases a job may lose.")
    JOB_TIMEOUT_S: float = Field(default=300.0, gt=0, description="A runner's time per job.")
    MAX_QUEUE: int = Field(default=1000, ge=1, description="Queued jobs before 429.")
    MAX_QUEUE_PER_CLIENT: int = Field(
        default=200, ge=1, description="Queued jobs one client may have before 429."
    )
    MAX_WAITING: int = Field(
        default=100,
        ge=1,
        description="Queued jobs no connected worker can run, counted apart; more get 429.",
    )
    FORWARDED_ALLOW_IPS: str = Field(
        default="127.0.0.1",
        description="Proxies (addresses or networks, comma-separated, or *) whose "
        "X-Forwarded-For names the client; from any other peer the header is ignored.",
    )
    FORWARDED_ALLOW_UDS: bool = Field(
        default=False,
        description="Whether the peer on `serve --uds`'s socket is a proxy (nginx) whose "
        "X-Forwarded-For names the client; off, every process on the socket is one client.",
    )
    SUBMIT_RATE: int = Field(default=120, ge=1, description="Submissions per client per minute.")
    RETAIN_RUNS: int = Field(
        default=5000, ge=1, description="Finished jobs (with their runs) kept before pruning."
    )
    RETAIN_DAYS: float = Field(
        default=90.0, gt=0, description="Finished jobs older than this are pruned."
    )
    FILES_MAX_BYTES: int = Field(
        default=2 * 1024**3,
        ge=1024,
        description="Stored files (uploads, traces) in all; beyond, the least recently used go.",
    )
    FILES_RETAIN_DAYS: float = Field(
        default=30.0, gt=0, description="An upload no job has named for this long is deleted."
    )
    PRUNE_INTERVAL_S: float = Field(
        default=30.0, gt=0, description="How often retention runs (and after each upload)."
    )
    ARTIFACT_MAX_BYTES: int = Field(
        default=4 * 1024 * 1024, ge=1024, description="Stored IR text per artifact."
    )
    HLO_DIFF_CACHE_BYTES: int = Field(
        default=32 * 1024 * 1024,
        ge=0,
        description="HLO diff reports kept in memory, counted as the bytes of their JSON.",
    )
    WORKER_GRACE_S: float = Field(
        default=120.0,
        ge=0,
        description="On SIGTERM, how long `serve` lets its local workers finish their jobs.",
    )
    PIPELINE_MAX_BYTES: int = Field(
        default=16 * 1024 * 1024,
        ge=1024,
        description="Stored pass-pipeline text per run (measure.pipeline); workers cap theirs too.",
    )
    ACCESS_LOG: bool = Field(default=False, description="Log every request (costs speed).")
    POLL_S: float = Field(
        default=25.0, gt=0, le=60, description="How long a worker's lease request may wait."
    )
    WORKER_STALE_S: float = Field(
        default=60.0, gt=0, description="A worker silent longer than this counts as gone."
    )
    MAX_WORKERS: int = Field(
        default=256,
        ge=1,
        description="Connected workers; a new registration past it gets 429.",
    )
    REAP_INTERVAL_S: float = Field(
        default=0.5, gt=0, le=10, description="How often expired leases and queued jobs are reaped."
    )
    INLINE_ARTIFACT_BYTES: int = Field(
        default=64 * 1024, ge=256, description="IR text per artifact returned inline with a run."
    )
    MAX_BODY_BYTES: int = Field(
        default=64 * 1024, ge=1024, description="Largest job submission body accepted."
    )
    PROFILE_MAX_BYTES: int = Field(
        default=32 * 1024 * 1024, ge=1024, description="Largest profiler trace stored per run."
    )
    UPLOAD_MAX_BYTES: int = Field(
        default=MAX_EXPORT_BYTES,
        ge=1024,
        description="Largest uploaded file (an exported function or an .npz of arrays).",
    )

    HEADER_TIMEOUT_S: float = Field(
        default=10.0,
        gt=0,
        le=30,
        description="A connection whose request headers are not complete by then is closed.",
    )
    BODY_TIMEOUT_S: float = Field(
        default=30.0, gt=0, description="A request body that stops arriving this long: 408."
    )
    MAX_CONNECTIONS: int = Field(
        default=2000,
        ge=1,
        description="Open connections; past it a new one displaces a stalled one, or gets 503.",
    )
    MAX_CONNECTIONS_PER_CLIENT: int = Field(
        default=256,
        ge=1,
        description="Open connections per client; past it a stalled one is displaced, or 429.",
    )
    WRITE_TIMEOUT_S: float = Field(
        default=30.0,
        gt=0,
        description="An answer the client stops reading for this long: the connection closes.",
    )
    BODY_MIN_RATE: int = Field(
        default=1024,
        ge=1,
        description="Bytes per second a request body must average after BODY_TIMEOUT_S: 408.",
    )
    MAX_STREAMS_PER_CLIENT: int = Field(
        default=100, ge=1, description="Open event streams per client; more get 429."
    )
    MAX_STREAMS: int = Field(
        default=1000, ge=1, description="Open event streams in all; more get 503."
    )
    MCP: bool = Field(
        default=False,
        description="Serve the MCP endpoint at /mcp (streamable HTTP) for coding assistants; "
        "its tools go through the HTTP API, with the caller's bearer token.",
    )

    @field_validator("DB", mode="before")
    @classmethod
    def _a_database(cls, value: object) -> str:
        # A path (tests pass Path objects) or a URL; anything else stops start-up here,
        # before a folder named "postgresql:" could appear.
        text = str(value) if isinstance(value, str | PathLike) else value
        if not isinstance(text, str):
            raise ValueError("give a SQLite file path or a postgresql:// URL")
        try:
            parse_db(text)
        except BadDatabaseSetting as exc:
            raise ValueError(str(exc)) from None
        return text

    @field_validator("WORKER_TOKEN", "SUBMIT_TOKEN")
    @classmethod
    def _long_enough(cls, value: str | None) -> str | None:
        # An empty token would let "Bearer " through; a short one is guessed.
        if value is not None and len(value.strip()) < MIN_TOKEN_CHARS:
            raise ValueError(
                f"a token needs at least {MIN_TOKEN_CHARS} characters (unset the variable for none)"
            )
        return value


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process's settings, read from the environment on first use."""
    return Settings()
