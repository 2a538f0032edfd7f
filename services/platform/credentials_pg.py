"""Postgres adapter for credentials and spaces."""

from __future__ import annotations

import re
from typing import Any
from uuid import UUID

from services.platform.auth import KEY_PREFIX, Caller, CredentialLookup, Scope, hash_key, is_key_shaped, new_key
from services.platform.db import Database


class KeysExist(Exception):  # noqa: N818 - a state, not a failure
    """A first key was asked for, and the stack has one."""


class PgCredentials(CredentialLookup):
    def __init__(self, db: Database) -> None:
        self._db = db

    async def any_keys(self) -> bool:
        """Whether the stack is closed: once any key was issued, every call needs a live one.
        Revoked keys count, so revoking the last key never opens the stack again."""
        return bool(await self._db.fetchval("SELECT EXISTS (SELECT 1 FROM credentials)"))

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
        key: str | None = None,
        first: bool = False,
    ) -> tuple[str, Caller]:
        """Issue a key; the clear key is returned once and never stored. ``key``: register
        this key (one the operator generated) instead of a new one. ``first``: only when no
        key exists yet (else KeysExist), atomic against a concurrent first issue."""
        if scope is Scope.NONE:
            raise ValueError("a key needs the read, ingest or write scope")
        if key is not None and not (key.startswith(KEY_PREFIX) and len(key) >= len(KEY_PREFIX) + 32
                                    and is_key_shaped(key)):
            raise ValueError(f"a key must be {KEY_PREFIX} followed by at least 32 URL-safe characters")
        key = key or new_key()
        async with self._db.transaction() as conn:
            if first:
                await conn.execute("SELECT pg_advisory_xact_lock(hashtext('testament.first_key'))")
                if await conn.fetchval("SELECT EXISTS (SELECT 1 FROM credentials)"):
                    raise KeysExist("a key exists already; none was issued")
            row = await conn.fetchrow(
                """INSERT INTO credentials (space_id, key_hash, key_prefix, label, scope,
                                             principals, trusted)
                   SELECT space_id, $2, $3, $4, $5, $6, $7 FROM spaces WHERE slug = $1
                   ON CONFLICT (key_hash) DO NOTHING
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
                if await conn.fetchval("SELECT EXISTS (SELECT 1 FROM credentials WHERE key_hash = $1)",
                                       hash_key(key)):
                    raise ValueError("that key is registered already")
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

    async def list_keys(self, space_slug: str | None = None) -> list[dict[str, object]]:
        """Every key (never the key itself): prefix, space, scope, principals, state."""
        rows = await self._db.fetch(
            """SELECT c.credential_id, c.key_prefix, s.slug AS space, c.scope, c.principals, c.trusted, c.label,
                      c.created_at, c.revoked_at
                 FROM credentials c JOIN spaces s USING (space_id)
                WHERE $1::text IS NULL OR s.slug = $1
                ORDER BY c.created_at, c.credential_id""", space_slug)
        return [{**dict(r), "credential_id": str(r["credential_id"]), "created_at": r["created_at"].isoformat(),
                 "revoked_at": r["revoked_at"].isoformat() if r["revoked_at"] else None} for r in rows]

    async def revoke(self, credential: str) -> str | None:
        """Revoke by credential id or by key prefix (unique); returns the id revoked, None
        when nothing live matches. A revoked key is refused on its next request."""
        rows = await self._db.fetch(
            """UPDATE credentials SET revoked_at = clock_timestamp()
                WHERE revoked_at IS NULL
                  AND (credential_id::text = $1 OR (key_prefix = $1 AND (SELECT count(*) FROM credentials
                                                                         WHERE key_prefix = $1) = 1))
            RETURNING credential_id""", credential)
        return str(rows[0]["credential_id"]) if rows else None

    async def create_space(self, slug: str, name: str) -> UUID:
        if not re.fullmatch(r"[a-z][a-z0-9-]{0,62}", slug):
            raise ValueError(f"a space slug is a lowercase letter then up to 62 of a-z, 0-9 and '-', not {slug!r}")
        value = await self._db.fetchval(
            "INSERT INTO spaces (slug, name) VALUES ($1, $2) ON CONFLICT (slug) DO NOTHING RETURNING space_id",
            slug, name)
        if value is None:
            raise ValueError(f"a space with slug {slug!r} exists already")
        return UUID(str(value))

    async def list_spaces(self) -> list[dict[str, object]]:
        rows = await self._db.fetch(
            """SELECT s.space_id, s.slug, s.name, s.is_default, s.created_at,
                      (SELECT count(*) FROM credentials c WHERE c.space_id = s.space_id AND c.revoked_at IS NULL)
                          AS live_keys
                 FROM spaces s ORDER BY s.created_at, s.slug""")
        return [{**dict(r), "space_id": str(r["space_id"]), "created_at": r["created_at"].isoformat()} for r in rows]

    async def create_key_in(self, space_id: UUID, *, scope: Scope, principals: list[str], trusted: bool,
                            label: str) -> tuple[str, Caller]:
        """Issue a key in a space given by id (the admin RPC's: always the caller's own)."""
        slug = await self._db.fetchval("SELECT slug FROM spaces WHERE space_id = $1", space_id)
        return await self.create_key(scope=scope, space_slug=slug, principals=principals, trusted=trusted,
                                     label=label)

    async def keys_of(self, space_id: UUID) -> list[Any]:
        return await self._db.fetch(
            """SELECT credential_id, key_prefix, scope, principals, trusted, label, created_at, revoked_at
                 FROM credentials WHERE space_id = $1 ORDER BY created_at, credential_id""", space_id)

    async def revoke_in(self, space_id: UUID, credential_id: UUID) -> bool:
        result = await self._db.execute(
            """UPDATE credentials SET revoked_at = clock_timestamp()
                WHERE credential_id = $1 AND space_id = $2 AND revoked_at IS NULL""", credential_id, space_id)
        return result.endswith(" 1")

