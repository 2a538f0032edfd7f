"""Conversion routes: which converter turns which MIME type into Markdown.

Route matching is exact (``text/x-markdown`` is not ``text/markdown``) and never
sniffs. A type with no route is accepted and parked (``no_route``) until a route
appears or the bytes are re-sent with a routable type. Shared by ingest (parking
at upload) and the pipeline (the convert stage).
"""

from __future__ import annotations

import json
from collections.abc import Mapping

CONVERTERS = frozenset({"passthrough", "markitdown"})

DEFAULT_ROUTES: Mapping[str, str] = {
    "text/markdown": "passthrough",
    "text/plain": "passthrough",
    "text/html": "markitdown",
    "application/pdf": "markitdown",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": "markitdown",
    "application/vnd.openxmlformats-officedocument.presentationml.presentation": "markitdown",
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet": "markitdown",
}


def parse_routes(raw: str | None) -> dict[str, str]:
    """A JSON MIME→converter map that replaces the defaults; None → the defaults."""
    if raw is None or raw.strip() == "":
        return dict(DEFAULT_ROUTES)
    try:
        routes = json.loads(raw)
    except ValueError as exc:
        raise ValueError(f"conversion routes are not valid JSON: {exc}") from None
    if not isinstance(routes, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                               for k, v in routes.items()):
        raise ValueError("conversion routes must be a JSON object of MIME type -> converter name")
    unknown = sorted(set(routes.values()) - CONVERTERS)
    if unknown:
        raise ValueError(f"unknown converter(s) {unknown}; known: {sorted(CONVERTERS)}")
    return routes
