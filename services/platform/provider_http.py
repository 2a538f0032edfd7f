"""What the OpenAI-compatible provider adapters read from a failed HTTP answer: how long
the server asked us to wait, and its one-line reason (clipped, for failure messages)."""

from __future__ import annotations

import email.utils
from datetime import UTC, datetime

import httpx


def retry_after(response: httpx.Response) -> float | None:
    """Seconds to wait from ``retry-after-ms`` or ``retry-after`` (seconds or an HTTP date)."""
    raw_ms = response.headers.get("retry-after-ms")
    if raw_ms is not None:
        try:
            return max(0.0, float(raw_ms) / 1000)
        except ValueError:
            pass
    raw = response.headers.get("retry-after")
    if raw is None:
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def error_message(response: httpx.Response) -> str:
    """The OpenAI-style ``error.message``, at most 200 characters; empty if there is none."""
    try:
        return str(response.json()["error"]["message"])[:200]
    except Exception:
        return ""
