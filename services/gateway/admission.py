"""Admission at the front door: who may start a request now, and CORS.

Pure: no transport. The gateway asks :class:`Admission` after the credential check and
before routing (RememberStack's order); every limit is off unless set above zero.

* per key and per space: a token bucket refilled continuously at the per-minute rate
  with a burst of a quarter of it (at least 1), and an in-flight ceiling; a refusal is
  429 ``rate_limited`` (Retry-After = seconds to the next token) or
  ``concurrency_limited`` (Retry-After 1), and counts against nothing;
* open stacks and keys without an id count only per space.

The global in-flight ceiling (503 before the body is read) lives in the gateway itself.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit


@dataclass
class TokenBucket:
    per_minute: float
    clock: Callable[[], float] = time.monotonic
    tokens: float = field(init=False)
    at: float = field(init=False)

    def __post_init__(self) -> None:
        self.tokens = self.burst
        self.at = self.clock()

    @property
    def burst(self) -> float:
        return max(1.0, self.per_minute / 4)

    def _refill(self) -> None:
        now = self.clock()
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.per_minute / 60)
        self.at = now

    def wait_s(self) -> float:
        """0 when a token is there now; else the seconds until the next one."""
        self._refill()
        return 0.0 if self.tokens >= 1 else (1 - self.tokens) * 60 / self.per_minute

    def take(self) -> None:
        self.tokens -= 1


@dataclass(frozen=True)
class Limits:
    key_per_minute: int = 0
    key_in_flight: int = 0
    space_per_minute: int = 0
    space_in_flight: int = 0


@dataclass(frozen=True)
class Refusal:
    code: str  # rate_limited | concurrency_limited
    retry_after_s: int
    message: str


class Admission:
    """In-memory counters of one gateway process (N processes = N times the limits)."""

    def __init__(self, limits: Limits, *, clock: Callable[[], float] = time.monotonic,
                 max_tracked: int = 100_000) -> None:
        self.limits = limits
        self._clock = clock
        self._buckets: dict[tuple[str, str], TokenBucket] = {}
        self._in_flight: dict[tuple[str, str], int] = {}
        self._max_tracked = max_tracked

    def _subjects(self, space: str, key: str | None) -> list[tuple[tuple[str, str], int, int]]:
        subjects = [(("space", space), self.limits.space_per_minute, self.limits.space_in_flight)]
        if key is not None:
            subjects.insert(0, (("key", key), self.limits.key_per_minute, self.limits.key_in_flight))
        return subjects

    def admit(self, space: str, key: str | None) -> Refusal | None:
        """Take a token and an in-flight slot for each subject, or refuse (taking nothing)."""
        subjects = self._subjects(space, key)
        for subject, _, ceiling in subjects:
            if ceiling and self._in_flight.get(subject, 0) >= ceiling:
                return Refusal("concurrency_limited", 1, f"too many requests in flight for this {subject[0]}")
        buckets = []
        for subject, rate, _ in subjects:
            if not rate:
                continue
            bucket = self._buckets.get(subject)
            if bucket is None:
                if len(self._buckets) >= self._max_tracked:
                    self._buckets.clear()  # bounded memory; a reset only ever admits more
                bucket = self._buckets[subject] = TokenBucket(rate, self._clock)
            wait = bucket.wait_s()
            if wait > 0:
                return Refusal("rate_limited", max(1, math.ceil(wait)), f"rate limit of this {subject[0]} reached")
            buckets.append(bucket)
        for bucket in buckets:
            bucket.take()
        for subject, _, ceiling in subjects:
            if ceiling:
                self._in_flight[subject] = self._in_flight.get(subject, 0) + 1
        return None

    def release(self, space: str, key: str | None) -> None:
        for subject, _, ceiling in self._subjects(space, key):
            if ceiling:
                left = self._in_flight.get(subject, 0) - 1
                if left > 0:
                    self._in_flight[subject] = left
                else:
                    self._in_flight.pop(subject, None)


# --- CORS -------------------------------------------------------------------------------

_LOCAL_HOSTS = ("localhost", "127.0.0.1", "[::1]")


class CorsConfigError(ValueError):
    pass


def parse_origins(raw: str) -> frozenset[str]:
    """Exact lowercase origins: https, or http on a loopback host; no wildcard, path,
    userinfo or explicit default port. A bad, empty or trailing entry is refused."""
    if not raw.strip():
        return frozenset()
    origins = []
    for entry in raw.split(","):
        origin = entry.strip()
        if not origin:
            raise CorsConfigError("TESTAMENT_CORS_ORIGINS has an empty entry")
        parts = urlsplit(origin)
        host = parts.hostname or ""
        netloc_host = parts.netloc.rsplit(":", 1)[0] if parts.port else parts.netloc
        if (origin != origin.lower() or "*" in origin or parts.path not in ("",) or parts.query or parts.fragment
                or parts.username or parts.password or not host
                or parts.scheme not in ("https", "http")
                or (parts.scheme == "http" and netloc_host not in _LOCAL_HOSTS)
                or (parts.scheme == "https" and parts.port == 443) or (parts.scheme == "http" and parts.port == 80)):
            raise CorsConfigError(
                f"TESTAMENT_CORS_ORIGINS: {origin!r} must be an exact lowercase https origin (http only on "
                "localhost, 127.0.0.1 or [::1]) with no path, userinfo, wildcard or default port")
        origins.append(origin)
    return frozenset(origins)


CORS_METHODS = "GET, POST, DELETE"
CORS_HEADERS = ("authorization, content-type, connect-protocol-version, connect-timeout-ms, x-grpc-web, "
                "grpc-timeout, x-user-agent")
CORS_EXPOSE = "grpc-status, grpc-message, grpc-status-details-bin, retry-after, x-trace-id"
