"""Query-space rules without a database: cell encoding, admission budgets, discovery search,
the manifest and the saved-query validator."""

from __future__ import annotations

import datetime as dt
import decimal
import uuid

import pytest

from services.platform.auth import Caller, Scope
from services.queryspace import manifest as m
from services.queryspace.app import INTERACTIVE, Admission, QuerySpace, validate
from services.queryspace.encoding import encode, iso_duration
from services.queryspace.examples import EXAMPLES
from services.queryspace.guard import Rejected


def test_one_json_shape_per_sql_type() -> None:
    assert encode(None, "int8") is None
    assert encode(2**62, "int8") == str(2**62) and encode(7, "int8") == "7"  # the type decides, not the value
    assert encode(7, "int4") == 7 and encode(1.5, "float8") == 1.5
    assert encode(float("nan"), "float8") == "NaN" and encode(float("inf"), "float4") == "inf"
    assert encode(decimal.Decimal("1.10"), "numeric") == "1.10"
    stamp = dt.datetime(2026, 1, 1, 12, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    assert encode(stamp, "timestamptz") == "2026-01-01T10:00:00+00:00"
    assert encode(b"\x00\x01", "bytea") == "AAE="
    assert encode([1, None], "_int8", "int8") == ["1", None]
    assert encode({"a": 1}, "jsonb") == {"a": 1}
    assert encode(uuid.UUID(int=1), "uuid") == "00000000-0000-0000-0000-000000000001"


@pytest.mark.parametrize(("delta", "text"), [
    (dt.timedelta(days=1, hours=2), "P1DT2H"), (dt.timedelta(0), "PT0S"), (dt.timedelta(minutes=90), "PT1H30M"),
    (dt.timedelta(seconds=1, microseconds=500), "PT1.000500S"), (dt.timedelta(days=-1), "-P1D"),
])
def test_intervals_are_iso_durations(delta: dt.timedelta, text: str) -> None:
    assert iso_duration(delta) == text


def _caller(credential: uuid.UUID | None = None, space: uuid.UUID | None = None) -> Caller:
    return Caller(space or uuid.UUID(int=1), Scope.READ, None, credential_id=credential)


def test_concurrency_is_limited_per_caller_and_per_deployment() -> None:
    clock = [0.0]
    admission = Admission(INTERACTIVE, clock=lambda: clock[0])
    a = _caller(uuid.uuid4())
    held = [admission.enter(a), admission.enter(a)]
    with pytest.raises(Rejected) as busy:
        admission.enter(a)
    assert busy.value.code == "concurrency_exceeded"
    others = [admission.enter(_caller(uuid.uuid4())) for _ in range(6)]  # 8 per deployment in all
    with pytest.raises(Rejected):
        admission.enter(_caller(uuid.uuid4()))
    assert admission.enter(_caller(uuid.uuid4(), uuid.UUID(int=2)))  # another deployment is not affected
    for keys in held + others:
        admission.leave(keys, 0.01)
    assert admission.enter(a)


def test_the_per_minute_budget_gives_quota_exceeded_then_recovers() -> None:
    clock = [0.0]
    admission = Admission(INTERACTIVE, clock=lambda: clock[0])
    a = _caller(uuid.uuid4())
    admission.leave(admission.enter(a), 31.0)
    with pytest.raises(Rejected) as spent:
        admission.enter(a)
    assert spent.value.code == "quota_exceeded"
    clock[0] = 61.0
    assert admission.enter(a)
    admission.disabled = True
    with pytest.raises(Rejected) as off:
        admission.enter(a)
    assert off.value.code == "quota_exceeded"


def test_discovery_search_weighs_names_and_refuses_blank_queries() -> None:
    service = QuerySpace(None, None, None)  # type: ignore[arg-type]
    hits = service.search("contradiction members", 5)
    assert hits[0]["name"] == "contradiction_members_current" and hits[0]["kind"] == "view"
    assert [h["score"] for h in hits] == sorted((h["score"] for h in hits), reverse=True)
    assert any(h["kind"] == "example" for h in service.search("graph path", 25))
    with pytest.raises(Exception) as blank:
        service.search("  ", None)
    assert getattr(blank.value, "detail", None) == {"code": "invalid_parameter", "message": "query must be non-empty"}


def test_describe_filters_views_by_glob_and_lists_examples_on_request() -> None:
    service = QuerySpace(None, None, None)  # type: ignore[arg-type]
    described = service.describe("claims_*", False)
    assert {v["name"] for v in described["views"]} == {"claims_live", "claims_visible_history", "claims_canonical"}
    assert described["examples"] == [] and described["headline"] == m.HEADLINE
    assert len(service.describe(None, True)["examples"]) == 18
    assert all(c[2] is True for v in described["views"] for c in v["columns"])


def test_manifest_shape() -> None:
    assert len(m.VIEWS) == 25 and len(m.FUNCTIONS) == 12
    assert all(v.columns[0].name == "deployment_id" and v.key[0] == "deployment_id" for v in m.VIEWS.values())
    assert all(k in {c.name for c in v.columns} for v in m.VIEWS.values() for k in v.key)
    assert len(m.MANIFEST_HASH) == 64


def test_every_shipped_example_validates_and_saved_sql_is_checked() -> None:
    assert len(EXAMPLES) == 18 and len({e["name"] for e in EXAMPLES}) == 18
    for example in EXAMPLES:
        report = validate(example["sql"])
        assert report["status"] == "valid", (example["name"], report)
        assert report["parameters"] == len(example["parameters"]), example["name"]
    assert validate("SELECT * FROM documents")["error"] == "relation_not_allowed"
