"""Ingest rules: lineage, identity, first-write-wins metadata, attribution, cursors, readiness.

Pure: no transport, no driver. Every refusal uses RememberStack's wording.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Literal

from services.platform import values
from services.platform.auth import Caller
from services.platform.errors import (
    SCOPE_TOO_NARROW,
    BadRequest,
    FieldViolation,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
    TestamentError,
    ValidationFailed,
)
from services.platform.values import parse_utc

VersioningMode = Literal["snapshot", "living"]
UPLOAD_SOURCE_KIND = "upload"

PAIR_TOGETHER = "source_kind and source_ref must be supplied together"
NEEDS_PAIR = "source timestamps, revisions, and living mode require source_kind/source_ref"
NOT_UTC = "source_modified_at must be timezone-aware UTC"
PRINCIPAL_TOGETHER = "X-Ingest-Principal-Kind and X-Ingest-Principal-Ref must be supplied together"
INVALID_PRINCIPAL = "invalid_ingest_principal"
DOCUMENT_NOT_FOUND = "document_not_found"
BODY_TOO_LARGE = "body_too_large"

_PRINCIPAL_KINDS = ("user", "api_credential", "service")
_PRINTABLE_ASCII = re.compile(r"^[\x20-\x7e]{1,255}$")
# Deterministic document ids: a pair (or content identity) always maps to the same id.
_DOC_NAMESPACE = uuid.UUID("5d1f3a8e-7c2b-4e61-9a0f-3b8c6d2e1f47")


@dataclass(frozen=True)
class UploadRequest:
    """The upload's options as received (strings as given; validation happens here)."""

    filename: str
    mime: str
    title: str | None = None
    source_kind: str | None = None
    source_ref: str | None = None
    source_modified_at: str | None = None
    versioning_mode: VersioningMode | None = None
    source_version_ref: str | None = None
    principal_kind: str | None = None
    principal_ref: str | None = None
    acl: tuple[str, ...] = ()


@dataclass(frozen=True)
class Attribution:
    kind: str
    ref: str


@dataclass(frozen=True)
class IngestCommand:
    """A validated upload: everything needed to record it once the bytes are in."""

    filename: str
    mime: str
    title: str
    source_kind: str
    source_ref: str | None
    source_modified_at: dt.datetime | None
    versioning_mode: VersioningMode
    source_version_ref: str | None
    attribution: Attribution | None
    acl: tuple[str, ...]

    @property
    def has_pair(self) -> bool:
        return self.source_ref is not None

    def doc_id(self, space_id: uuid.UUID, content_hash: str) -> uuid.UUID:
        if self.source_ref is not None:
            return uuid.uuid5(_DOC_NAMESPACE, f"{space_id}\x00pair\x00{self.source_kind}\x00{self.source_ref}")
        # Without a pair the bytes are the identity. The audience is part of it, so an
        # upload for other principals never lands in (or reveals) someone else's document.
        audience = "\x01".join(self.acl)
        return uuid.uuid5(_DOC_NAMESPACE, f"{space_id}\x00content\x00{content_hash}\x00{audience}")

    def identity_hash(self, content_hash: str) -> str | None:
        """Without a pair: the bytes (plus the audience, when one is named)."""
        if self.has_pair:
            return None
        if not self.acl:
            return content_hash
        return hashlib.sha256(f"{content_hash}\x00{chr(1).join(self.acl)}".encode()).hexdigest()


def _too_short(name: str, value: str) -> FieldViolation:
    return FieldViolation(name, "String should have at least 1 character", "string_too_short", value,
                          {"min_length": 1})


def validate_upload(request: UploadRequest, caller: Caller, *, trusted_attribution: bool) -> IngestCommand:
    """Check an upload's options before any byte is read."""
    problems = [_too_short(n, v) for n, v in (("filename", request.filename), ("mime", request.mime)) if v == ""]
    for name in ("source_kind", "source_ref", "title", "source_version_ref"):
        value = getattr(request, name)
        if value is not None and value == "":
            problems.append(_too_short(name, value))
    if problems:
        raise ValidationFailed(problems)
    if (request.source_kind is None) != (request.source_ref is None):
        raise InvalidArgument(PAIR_TOGETHER, reason="SOURCE_PAIR_INCOMPLETE")
    has_pair = request.source_ref is not None
    if not has_pair and (
        request.source_modified_at is not None
        or request.source_version_ref is not None
        or request.versioning_mode == "living"
    ):
        raise InvalidArgument(NEEDS_PAIR, reason="SOURCE_LINEAGE_REQUIRES_PAIR")
    modified = (
        parse_utc("source_modified_at", request.source_modified_at, refusal=NOT_UTC)
        if request.source_modified_at is not None
        else None
    )
    attribution = _attribution(request, caller) if trusted_attribution else None
    acl = tuple(sorted(set(request.acl)))
    if any(p == "" or len(p) > 255 for p in acl):
        raise ValidationFailed([FieldViolation("acl", "principals are 1 to 255 characters", "value_error",
                                               list(request.acl))])
    if caller.principals is not None and not set(acl) <= caller.principals:
        raise PermissionDenied(SCOPE_TOO_NARROW, reason="PRINCIPAL_NOT_HELD")
    return IngestCommand(
        filename=request.filename,
        mime=request.mime,
        title=request.title if request.title is not None else default_title(request.filename),
        source_kind=request.source_kind if has_pair else UPLOAD_SOURCE_KIND,  # type: ignore[arg-type]
        source_ref=request.source_ref,
        source_modified_at=modified,
        versioning_mode=request.versioning_mode or "snapshot",
        source_version_ref=request.source_version_ref,
        attribution=attribution,
        acl=acl,
    )


def _attribution(request: UploadRequest, caller: Caller) -> Attribution | None:
    """Attribution headers count only in trusted mode and for an open stack or a write key;
    otherwise they are silently ignored."""
    from services.platform.auth import Scope

    if not (caller.open_mode or caller.scope is Scope.WRITE):
        return None
    kind, ref = request.principal_kind, request.principal_ref
    if kind is None and ref is None:
        return None
    if (kind is None) != (ref is None):
        raise InvalidArgument(PRINCIPAL_TOGETHER, reason="PRINCIPAL_INCOMPLETE")
    assert kind is not None and ref is not None
    if kind not in _PRINCIPAL_KINDS or not _PRINTABLE_ASCII.match(ref):
        raise InvalidArgument(INVALID_PRINCIPAL, reason="INVALID_INGEST_PRINCIPAL")
    return Attribution(kind, ref)


def default_title(filename: str) -> str:
    name = PurePosixPath(filename.replace("\\", "/")).name or filename
    stem = name.rsplit(".", 1)[0] if "." in name.lstrip(".") else name
    return stem or filename


def body_too_large() -> TestamentError:
    return ResourceExhausted(BODY_TOO_LARGE, reason="BODY_TOO_LARGE", http_status=413)


def document_not_found() -> NotFound:
    return NotFound(DOCUMENT_NOT_FOUND, reason="DOCUMENT_NOT_FOUND")


# --------------------------------------------------------------------------------------
# listing
# --------------------------------------------------------------------------------------

LIST_STATUSES = ("ingesting", "converting", "structuring", "ready", "failed")


@dataclass(frozen=True)
class ListQuery:
    limit: int = 50
    after: tuple[dt.datetime, uuid.UUID] | None = None
    status: str | None = None


def encode_cursor(first_seen_at: dt.datetime, doc_id: uuid.UUID) -> str:
    return values.encode_cursor({"v": 1, "f": first_seen_at.isoformat(), "i": str(doc_id)})


def decode_cursor(raw: str) -> tuple[dt.datetime, uuid.UUID]:
    data = values.decode_cursor(raw, ("v", "f", "i"))
    if data["v"] != 1:
        raise BadRequest(values.CURSOR_MALFORMED, reason="CURSOR_MALFORMED")
    return values.cursor_instant(data["f"]), values.cursor_uuid(data["i"])


LIST_PAGE = 50


def list_query(limit: int | None, cursor: str | None, status: str | None) -> ListQuery:
    limit = LIST_PAGE if limit is None else limit  # 1-200: the contract's rule
    if status is not None and status not in LIST_STATUSES:
        allowed = ", ".join(f"'{s}'" for s in LIST_STATUSES[:-1]) + f" or '{LIST_STATUSES[-1]}'"
        raise ValidationFailed([FieldViolation("status", f"Input should be {allowed}", "literal_error", status,
                                               {"expected": allowed})])
    return ListQuery(limit=limit, after=decode_cursor(cursor) if cursor else None, status=status)


# --------------------------------------------------------------------------------------
# readiness
# --------------------------------------------------------------------------------------



@dataclass(frozen=True)
class WorkState:
    """One queued unit of a stage, as stored."""

    stage: str
    component_version: str
    status: str
    defer_reason: str | None
    not_before: dt.datetime
    finished_at: dt.datetime | None


@dataclass(frozen=True)
class StageReadiness:
    stage: str
    component_version: str
    status: str
    finished_at: dt.datetime | None
    defer_reason: str | None

    @property
    def done(self) -> bool:
        return self.status in ("succeeded", "skipped") and self.finished_at is not None


@dataclass(frozen=True)
class VersionReadiness:
    version_id: uuid.UUID
    stages: tuple[StageReadiness, ...]

    @property
    def ready(self) -> bool:
        return all(s.done for s in self.stages)

    @property
    def dead_lettered(self) -> bool:
        return any(s.status == "dead_letter" for s in self.stages)


def stage_readiness(stage: str, component_version: str, units: Sequence[WorkState],
                    now: dt.datetime) -> StageReadiness:
    """Fold a stage's units into one status: the worst one wins."""
    mine = [u for u in units if u.stage == stage and u.component_version == component_version]
    if not mine:
        return StageReadiness(stage, component_version, "missing", None, None)
    statuses = {u.status for u in mine}
    for worst in ("dead_letter", "failed", "running", "pending"):
        if worst in statuses:
            unit = next(u for u in mine if u.status == worst)
            reason = unit.defer_reason
            if worst == "failed":
                reason = "retry_backoff"
            elif worst == "pending" and reason is None and unit.not_before > now:
                reason = "scheduled"
            if worst in ("dead_letter", "running"):
                reason = None
            return StageReadiness(stage, component_version, worst, None, reason)
    finished = [u.finished_at for u in mine if u.finished_at is not None]
    status = "skipped" if statuses == {"skipped"} else "succeeded"
    return StageReadiness(stage, component_version, status, max(finished) if finished else None, None)


def version_readiness(version_id: uuid.UUID, stages: Iterable[tuple[str, str]],
                      units: Sequence[WorkState], now: dt.datetime) -> VersionReadiness:
    return VersionReadiness(version_id, tuple(stage_readiness(s, c, units, now) for s, c in stages))


@dataclass(frozen=True)
class Capability:
    required: bool
    ready: bool
    checked_at: dt.datetime
    reason: str


@dataclass(frozen=True)
class ReadinessReport:
    versions: tuple[VersionReadiness, ...]
    capabilities: dict[str, Capability] = field(default_factory=dict)

    @property
    def ready(self) -> bool:
        return all(c.ready for c in self.capabilities.values() if c.required)

    @property
    def terminal(self) -> bool:
        """Nothing more will change without intervention: ready, or a dead letter."""
        return self.ready or any(v.dead_lettered for v in self.versions)


def readiness_ids(raw: Sequence[str]) -> list[uuid.UUID]:
    """The versions asked about (1-1000 UUIDs: the contract's rules), duplicates collapsed in order."""
    return list(dict.fromkeys(uuid.UUID(value) for value in raw))
