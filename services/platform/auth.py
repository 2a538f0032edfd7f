"""Callers, credentials and scopes.

A credential is an API key stored as its SHA-256, bound to one space, one scope
(``read``, ``ingest`` or ``write``) and a list of principals (or ``trusted``:
every document of its space). Keys arrive as ``authorization: Bearer <key>``.
When no key exists at all the stack runs open, as RememberStack does: every
caller is the default space with full access.

The scope each RPC needs is declared in the contract
(``option (testament.common.v1.scope)``) and checked once, generically.
"""

from __future__ import annotations

import contextvars
import hashlib
import re
import secrets
import time
from dataclasses import dataclass
from enum import Enum
from uuid import UUID

from services.platform.errors import (
    AUTHENTICATION_FAILED,
    CREDENTIAL_REQUIRED,
    SCOPE_TOO_NARROW,
    PermissionDenied,
    Unauthenticated,
)


class Scope(Enum):
    NONE = "none"  # health: no credential needed
    READ = "read"
    INGEST = "ingest"
    WRITE = "write"


def allows(granted: Scope, required: Scope) -> bool:
    """``write`` covers everything; ``read`` and ``ingest`` are disjoint."""
    if required is Scope.NONE or granted is Scope.WRITE:
        return True
    return granted is required


@dataclass(frozen=True)
class Caller:
    """Who is calling: the space they are confined to and what they may see."""

    space_id: UUID
    scope: Scope
    # None = every document of the space (trusted key or open stack); otherwise the
    # caller sees documents whose ACL is empty or shares one of these principals.
    principals: frozenset[str] | None
    credential_id: UUID | None = None

    @property
    def open_mode(self) -> bool:
        return self.credential_id is None


current_caller: contextvars.ContextVar[Caller | None] = contextvars.ContextVar(
    "current_caller", default=None
)


def require_caller() -> Caller:
    caller = current_caller.get()
    if caller is None:  # pragma: no cover - the auth interceptor always sets it
        raise Unauthenticated(CREDENTIAL_REQUIRED, reason="CREDENTIAL_REQUIRED")
    return caller


KEY_PREFIX = "tsk_"
_KEY_RE = re.compile(r"^[A-Za-z0-9_\-]{16,256}$")


def new_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def is_key_shaped(key: str) -> bool:
    return bool(_KEY_RE.match(key))


def hash_key(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


def parse_bearer(header: str | None) -> str | None:
    """The key from an ``authorization`` value; None when absent.

    Raises Unauthenticated for a malformed value (so garbage is never looked up)."""
    if header is None or header.strip() == "":
        return None
    scheme, _, key = header.strip().partition(" ")
    key = key.strip()
    if scheme.lower() != "bearer" or not _KEY_RE.match(key):
        raise Unauthenticated(AUTHENTICATION_FAILED, reason="AUTHENTICATION_FAILED")
    return key


class CredentialLookup:
    """Port the authenticator uses; the Postgres adapter lives in ``credentials_pg``."""

    async def any_keys(self) -> bool:  # pragma: no cover - interface
        raise NotImplementedError

    async def find(self, key_hash: bytes) -> Caller | None:  # pragma: no cover - interface
        raise NotImplementedError

    async def default_space(self) -> UUID:  # pragma: no cover - interface
        raise NotImplementedError


class Authenticator:
    """Turns an ``authorization`` value and a required scope into a :class:`Caller`.

    Whether any key exists is cached briefly so an open stack does not ask the
    database on every call; a found key is re-checked every call (revocation is
    immediate)."""

    def __init__(self, lookup: CredentialLookup, *, cache_s: float = 2.0) -> None:
        self._lookup = lookup
        self._cache_s = cache_s
        self._keys_known_at = -1e9
        self._keys_exist = False
        self._default_space: UUID | None = None

    async def _any_keys(self) -> bool:
        now = time.monotonic()
        if now - self._keys_known_at > self._cache_s:
            self._keys_exist = await self._lookup.any_keys()
            self._keys_known_at = now
        return self._keys_exist

    async def authenticate(self, header: str | None, required: Scope) -> Caller | None:
        if required is Scope.NONE:
            return None
        return await self.identify(header, required)

    async def identify(self, header: str | None, required: Scope = Scope.READ) -> Caller:
        """The caller a header names; any scope passes when ``required`` is NONE."""
        if not await self._any_keys():
            # Open stack: the header is ignored, as RememberStack does without auth.
            if self._default_space is None:
                self._default_space = await self._lookup.default_space()
            return Caller(self._default_space, Scope.WRITE, None)
        key = parse_bearer(header)
        if key is None:
            raise Unauthenticated(CREDENTIAL_REQUIRED, reason="CREDENTIAL_REQUIRED")
        caller = await self._lookup.find(hash_key(key))
        if caller is None:
            raise Unauthenticated(AUTHENTICATION_FAILED, reason="AUTHENTICATION_FAILED")
        if required is not Scope.NONE and not allows(caller.scope, required):
            raise PermissionDenied(SCOPE_TOO_NARROW, reason="SCOPE_TOO_NARROW")
        return caller
