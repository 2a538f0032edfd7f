"""Resources every service process opens the same way (database, credentials, deployment).

Each service's composition root (``services/<name>/main.py``) calls
:func:`open_platform` and adds its own servicers and adapters.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import urlsplit

import asyncpg

from services.platform.auth import Authenticator
from services.platform.contract import SERVICE_FULL_NAMES
from services.platform.credentials_pg import PgCredentials
from services.platform.db import Database
from services.platform.deployment import DeploymentServicer
from services.platform.embeddings import RUNTIME_MODELS, EmbeddingUnavailable, provider_from_settings, warm_up
from services.platform.ledger import CostLedger, LedgeredEmbeddings
from services.platform.migrations import MigrationError
from services.platform.migrations import pending as pending_migrations
from services.platform.objectstore import ObjectStore, ObjectStoreError, build_object_store
from services.platform.replica import ReplicaMisconfigured, RoutedReads, check_standby
from services.platform.server import Closer, Servicer, StartupError
from services.platform.settings import Settings

# Where an open (keyless) stack may listen.
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")


@dataclass
class Platform:
    db: Database
    authenticator: Authenticator
    deployment: Servicer
    closers: list[Closer] = field(default_factory=list)


def redacted_dsn(dsn: str) -> str:
    parts = urlsplit(dsn)
    host = parts.hostname or "?"
    return f"{parts.scheme}://{parts.username or ''}@{host}:{parts.port or 5432}{parts.path}"


async def open_database(settings: Settings, name: str, *, custom_plans: bool = True,
                        max_size: int | None = None) -> Database:
    if not settings.database_url:
        raise StartupError(
            f"testament-{name}: TESTAMENT_DATABASE_URL (or DATABASE_URL) is not set; "
            "`testament up` sets it for the services it starts"
        )
    try:
        db = await Database.connect(
            settings.database_url,
            min_size=settings.db_pool_min,
            max_size=max_size or settings.db_pool_max,
            query_timeout_s=settings.db_query_timeout_s,
            connect_timeout_s=settings.db_connect_timeout_s,
            application_name=f"testament-{name}",
            custom_plans=custom_plans,
        )
    except (OSError, asyncpg.PostgresError, TimeoutError) as exc:
        raise StartupError(
            f"testament-{name}: cannot reach the database at "
            f"{redacted_dsn(settings.database_url)} (TESTAMENT_DATABASE_URL): {exc}"
        ) from None
    try:
        async with db.acquire() as conn:
            missing = await pending_migrations(conn)
    except MigrationError as exc:
        await db.close()
        raise StartupError(f"testament-{name}: {exc}") from None
    if missing:
        await db.close()
        raise StartupError(
            f"testament-{name}: the database at {redacted_dsn(settings.database_url)} lacks migration "
            f"{', '.join(missing)}: run `testament migrate` (the compose file's `migrate` service, the "
            "Kubernetes `testament-migrate` Job) before the services")
    return db


async def open_reads(settings: Settings, name: str, platform: Platform) -> Database | RoutedReads:
    """Where this service's reads go: the primary, or (TESTAMENT_READ_DATABASE_URL) a standby
    within TESTAMENT_REPLICA_MAX_LAG_S, checked to be a standby of the primary before use."""
    url = settings.read_database_url
    if not url:
        return platform.db
    if url == settings.database_url:
        raise StartupError(f"testament-{name}: TESTAMENT_READ_DATABASE_URL is TESTAMENT_DATABASE_URL: it must "
                           "name a streaming standby of the primary, not the primary itself")
    try:
        replica = await Database.connect(
            url, min_size=settings.db_pool_min, max_size=settings.db_pool_max,
            query_timeout_s=settings.db_query_timeout_s, connect_timeout_s=settings.db_connect_timeout_s,
            application_name=f"testament-{name}-reads")
    except (OSError, asyncpg.PostgresError, TimeoutError) as exc:
        raise StartupError(f"testament-{name}: cannot reach the read replica at {redacted_dsn(url)} "
                           f"(TESTAMENT_READ_DATABASE_URL): {exc}") from None
    try:
        await check_standby(platform.db, replica)
    except ReplicaMisconfigured as exc:
        await replica.close()
        raise StartupError(f"testament-{name}: {exc} ({redacted_dsn(url)})") from None
    reads = RoutedReads(platform.db, replica, max_lag_s=settings.replica_max_lag_s)
    await reads.start()
    platform.closers.append(reads.close)
    return reads


def model_bindings(settings: Settings) -> dict[str, str]:
    """Which model serves each role (no secrets): what /deployment reports."""
    def chat(provider: str) -> str:
        return f"openai:{settings.openai_chat_model}" if provider == "openai" else provider

    embedding = {"hash": f"hash-{settings.embedding_dimension}-v1",
                 "sentence-transformers": "sentence-transformers/all-MiniLM-L6-v2",
                 "minilm": RUNTIME_MODELS["onnx-int8"], "minilm-f32": RUNTIME_MODELS["numpy"],
                 "openai": f"openai:{settings.openai_embedding_model}"}[settings.embedding_provider]
    return {
        "structure_fallback": "rules", "section_role": "rules", "claim_extraction": chat(settings.claims_provider),
        "relation_normalization": chat(settings.relations_provider), "entity_resolution": "rules",
        "fact_adjudication": "rules", "p1_embedding": embedding,
    }


async def open_object_store(settings: Settings, name: str) -> ObjectStore:
    """The configured object store, checked before the service reports healthy."""
    store = build_object_store(
        backend=settings.object_store,
        local_root=settings.objects_root,
        s3_endpoint_url=settings.s3_endpoint_url,
        s3_bucket=settings.s3_bucket,
        s3_region=settings.s3_region,
        s3_access_key=settings.s3_access_key,
        s3_secret_key=settings.s3_secret_key,
        s3_create_bucket=settings.s3_create_bucket,
    )
    try:
        await store.check()
    except ObjectStoreError as exc:
        await store.close()
        where = settings.s3_endpoint_url if settings.object_store == "s3" else settings.objects_root
        raise StartupError(
            f"testament-{name}: the object store ({settings.object_store}, {where}) is not usable "
            f"(TESTAMENT_OBJECT_STORE): {exc}"
        ) from None
    return store


async def open_query_embedder(settings: Settings, db: Database, name: str) -> LedgeredEmbeddings:
    """The configured embedder for query text, each call on the cost ledger, its model
    loaded before the service reports SERVING (the first query runs at full speed)."""
    try:
        embedder = LedgeredEmbeddings(provider_from_settings(settings), CostLedger(db))
        await warm_up(embedder)
    except (ValueError, EmbeddingUnavailable) as exc:
        raise StartupError(f"testament-{name}: TESTAMENT_EMBEDDING_PROVIDER: {exc}") from None
    return embedder


async def open_platform(settings: Settings, name: str) -> Platform:
    db = await open_database(settings, name)
    credentials = PgCredentials(db)
    if settings.host not in LOOPBACK_HOSTS and not settings.allow_open_network and not await credentials.any_keys():
        await db.close()
        raise StartupError(
            f"testament-{name}: TESTAMENT_HOST={settings.host} is not a loopback address and no API key exists, "
            "so the stack would be open to the network; create a key first (`testament keys create`), or set "
            "TESTAMENT_ALLOW_OPEN_NETWORK=true when only a private network reaches it")
    authenticator = Authenticator(credentials)
    deployment = Servicer(
        SERVICE_FULL_NAMES["deployment"],
        DeploymentServicer(db, build_revision=settings.build_revision, model_bindings=model_bindings(settings),
                           authenticator=authenticator),
    )
    return Platform(
        db=db,
        authenticator=authenticator,
        deployment=deployment,
        closers=[db.close],
    )
