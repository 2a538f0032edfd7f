"""Postgres adapter for credentials and spaces."""

from __future__ import annotations

from uuid import UUID

from services.platform.auth import Caller, CredentialLookup, Scope, hash_key, new_key
from services.platform.db import Database


class PgCredentials(CredentialLookup):
    def __init__(self, db: Database) -> None:
        self._db = db

    async def any_keys(self) -> bool:
        return bool(
            await self._db.fetchval(
                "SELECT EXISTS (SELECT 1 FROM credentials WHERE revoked_at IS NULL)"
            )
        )

    async def find(self, key_hash: bytes) -> Caller | None:
        row = await self._db.fetchrow(
            """SELECT credential_id, space_id, scope, principals, trusted
                 FROM credentials WHERE key_hash = $1 AND revoked_at IS NULL""",
            key_hash,
        )
        if row is None:
            return None
        principals = None if row["trusted"] else frozenset(row["principals"])
        return Caller(row["space_id"], Scope(row["scope"]), principals, row["credential_id"])

    async def default_space(self) -> UUID:
        space = await self._db.fetchval("SELECT space_id FROM spaces WHERE is_default")
        if space is None:  # pragma: no cover - the first migration creates it
            raise RuntimeError("the database has no default space; run `testament migrate`")
        return UUID(str(space))

    async def create_key(
        self,
        *,
        scope: Scope,
        space_slug: str = "default",
        principals: list[str] | None = None,
        trusted: bool = False,
        label: str = "",
    ) -> tuple[str, Caller]:
        """Issue a key; the clear key is returned once and never stored."""
        if scope is Scope.NONE:
            raise ValueError("a key needs the read, ingest or write scope")
        key = new_key()
        row = await self._db.fetchrow(
            """INSERT INTO credentials (space_id, key_hash, key_prefix, label, scope,
                                         principals, trusted)
               SELECT space_id, $2, $3, $4, $5, $6, $7 FROM spaces WHERE slug = $1
               RETURNING credential_id, space_id""",
            space_slug,
            hash_key(key),
            key[:8],
            label,
            scope.value,
            principals or [],
            trusted,
        )
        if row is None:
            raise ValueError(f"no space with slug {space_slug!r}")
        caller = Caller(
            row["space_id"],
            scope,
            None if trusted else frozenset(principals or []),
            row["credential_id"],
        )
        return key, caller

    async def ensure_space(self, slug: str, name: str) -> UUID:
        value = await self._db.fetchval(
            """INSERT INTO spaces (slug, name) VALUES ($1, $2)
               ON CONFLICT (slug) DO UPDATE SET name = spaces.name RETURNING space_id""",
            slug,
            name,
        )
        return UUID(str(value))
