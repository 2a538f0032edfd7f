"""The ``openai`` claim provider against a real local HTTP server (fake_openai.py) speaking the
chat-completions API: reply → drafts with exact document offsets, relocation, the grounding gate
applied to whatever the model says, strict schema and time parsing, and failure classification."""

from __future__ import annotations

import copy
import dataclasses
import json
import socket
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from services.pipeline.adapters.openai_claims import CLAIMS_SCHEMA, ChatCall, OpenAIClaimProvider, parse_bound
from services.pipeline.adapters.store import draft_payload, load_payload
from services.pipeline.domain.claims import ClaimProvider, EvidenceSpan, ExtractionInput, Passage
from services.pipeline.domain.grounding import ground
from services.pipeline.domain.work import StageFailure

from .fake_openai import CHAT_PATH, FakeOpenAI

TITLE = "Billing migration stand-up"
PASSAGE_TEXT = (
    "Ravi said the migration moves from June to October. Dana agreed yesterday to tell finance.\n"
    "Should we back up first? Revenue fell 12% in Q2."
)
DOC = f"# {TITLE}\n\nDate: 17 September 2026\n\n{PASSAGE_TEXT}\n\nNext steps are in the tracker.\n"
P_START = DOC.index(PASSAGE_TEXT)
P_END = P_START + len(PASSAGE_TEXT)
SAID_ON = datetime(2026, 9, 17, 9, 30, tzinfo=UTC)
ITEM = ExtractionInput(DOC, Passage("chunk-1", P_START, P_END), SAID_ON, TITLE)

RAVI = "Ravi said the migration moves from June to October."
DANA = "Dana agreed yesterday to tell finance."
QUESTION = "Should we back up first?"
REVENUE = "Revenue fell 12% in Q2."


def at(span: str) -> tuple[int, int]:
    """Passage-relative offsets of a span that occurs once in the passage."""
    start = PASSAGE_TEXT.index(span)
    assert PASSAGE_TEXT.count(span) == 1
    return start, start + len(span)


def claim(span: str, text: str, **fields: Any) -> dict[str, Any]:
    start, end = at(span) if PASSAGE_TEXT.count(span) == 1 else (0, len(span))
    value: dict[str, Any] = {
        "source_span": span, "start": start, "end": end, "claim_text": text, "evidence": [],
        "is_attributed": False, "attributed_to": None, "edits": [], "flags": [], "temporal_class": "static",
        "valid_from": None, "valid_until": None, "valid_precision": "unknown", "valid_kind": None,
    }
    value.update(fields)
    return value


def good_reply() -> dict[str, Any]:
    q_start, q_end = at(QUESTION)
    return {
        "dropped": [{"statement": QUESTION, "start": q_start, "end": q_end, "reason": "question"}],
        "omitted": [],
        "claims": [
            claim(RAVI, "Ravi said that the billing migration moves from June 2026 to October 2026.",
                  evidence=[TITLE], is_attributed=True, attributed_to="Ravi", temporal_class="dynamic",
                  edits=[{"reason": "reference_expanded", "detail": "the migration -> the billing migration"},
                         {"reason": "date_resolved", "detail": "June to October -> June 2026 to October 2026"}],
                  valid_from="2026-06-01", valid_until="2026-10-31", valid_precision="month",
                  valid_kind="effective_period"),
            claim(DANA, "Dana agreed on 2026-09-16 to tell finance.", evidence=["17 September 2026"],
                  edits=[{"reason": "date_resolved", "detail": "yesterday -> 2026-09-16"}],
                  valid_from="2026-09-16", valid_until="2026-09-16", valid_precision="day", valid_kind="event_time"),
            claim(REVENUE, "Revenue fell 12% in Q2 2026.", valid_from="2026-04-01", valid_until="2026-06-30",
                  valid_precision="quarter", valid_kind="measurement_period", flags=["hedged", "hedged"]),
        ],
    }


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


@pytest.fixture()
def server(fake: FakeOpenAI) -> FakeOpenAI:
    fake.reset()
    return fake


def provider_for(server: FakeOpenAI, calls: list[ChatCall], **kwargs: Any) -> OpenAIClaimProvider:
    settings: dict[str, Any] = {"timeout_s": 5.0}
    settings.update(kwargs)
    return OpenAIClaimProvider(server.base_url, "sk-test", "test-chat", on_call=calls.append, **settings)


async def extract(server: FakeOpenAI, reply: Any, calls: list[ChatCall] | None = None, **kwargs: Any):  # noqa: ANN201
    server.reply_with(reply)
    async with provider_for(server, calls if calls is not None else [], **kwargs) as provider:
        return await provider.extract(ITEM)


async def failure(server: FakeOpenAI, *modes: str, reply: Any = None, calls: list[ChatCall] | None = None,
                  **kwargs: Any) -> StageFailure:
    server.script(*modes)  # type: ignore[arg-type]
    if reply is not None:
        server.reply_with(reply)
    async with provider_for(server, calls if calls is not None else [], **kwargs) as provider:
        with pytest.raises(StageFailure) as caught:
            await provider.extract(ITEM)
    return caught.value


# ------------------------------------------------------------------------ good replies


async def test_good_reply_becomes_exact_drafts_that_pass_the_gate(server: FakeOpenAI) -> None:
    drafts, decisions = await extract(server, good_reply())
    assert [d.claim_text for d in drafts] == [
        "Ravi said that the billing migration moves from June 2026 to October 2026.",
        "Dana agreed on 2026-09-16 to tell finance.",
        "Revenue fell 12% in Q2 2026.",
    ]
    for draft, span in zip(drafts, (RAVI, DANA, REVENUE), strict=True):
        assert draft.source_span == span == DOC[draft.char_start:draft.char_end]
        assert draft.char_start == P_START + PASSAGE_TEXT.index(span)  # document offsets
        assert draft.evidence_spans[0] == EvidenceSpan(draft.char_start, draft.char_end)

    ravi, dana, revenue = drafts
    assert ravi.is_attributed and ravi.attributed_to == "Ravi"
    assert ravi.evidence_spans[1:] == (EvidenceSpan(DOC.index(TITLE), DOC.index(TITLE) + len(TITLE)),)
    assert ravi.added_context == ("that", "billing", "2026")  # as the rules provider counts them
    assert (ravi.valid_from, ravi.valid_until, ravi.valid_precision, ravi.valid_kind) == (
        datetime(2026, 6, 1, tzinfo=UTC), datetime(2026, 10, 31, tzinfo=UTC), "month", "effective_period")
    assert dana.valid_from == dana.valid_until == datetime(2026, 9, 16, tzinfo=UTC)
    assert dana.valid_from.tzinfo is UTC
    day_line = DOC.index("17 September 2026")
    assert dana.evidence_spans[1] == EvidenceSpan(day_line, day_line + len("17 September 2026"))
    assert revenue.kept_flagged and not dana.kept_flagged
    assert revenue.temporal_class == "static" and ravi.temporal_class == "dynamic"

    assert [(d.kind, d.reason, DOC[d.char_start:d.char_end]) for d in decisions] == [
        ("selection_drop", "question", QUESTION),
        ("decontext_edit", "reference_expanded", RAVI),
        ("decontext_edit", "date_resolved", RAVI),
        ("decontext_edit", "date_resolved", DANA),
        ("selection_keep_flagged", "hedged", REVENUE),  # a repeated flag is recorded once
    ]

    kept, ledger = ground(ITEM, drafts, decisions)
    assert kept == drafts
    assert ledger == decisions
    assert load_payload(draft_payload(drafts, decisions)) == (drafts, decisions)  # storable as the rules output


async def test_provider_identity(server: FakeOpenAI) -> None:
    async with provider_for(server, []) as provider:
        typed: ClaimProvider = provider
        assert (typed.name, typed.version) == ("openai", "openai/test-chat/2")
        assert "sk-test" not in repr(provider)


async def test_wrong_offsets_are_relocated_when_the_span_is_unique(server: FakeOpenAI) -> None:
    reply = good_reply()
    reply["dropped"][0]["start"] += 3  # offsets off by three, statement text exact
    reply["dropped"][0]["end"] += 3
    for entry in reply["claims"]:
        entry["start"], entry["end"] = entry["start"] + 7, entry["end"] + 2
    drafts, decisions = await extract(server, reply)
    assert [d.source_span for d in drafts] == [RAVI, DANA, REVENUE]
    for draft in drafts:
        assert DOC[draft.char_start:draft.char_end] == draft.source_span
    assert DOC[decisions[0].char_start:decisions[0].char_end] == QUESTION
    assert ground(ITEM, drafts, decisions)[0] == drafts


async def test_unfound_or_ambiguous_span_is_omitted_with_span_not_found(server: FakeOpenAI) -> None:
    reply = good_reply()
    reply["claims"] = [
        claim("Ravi said the migration moved to June.", "Ravi said that the migration moved to June."),
        claim("to", "Ravi said that to.", start=0, end=2),  # "to" occurs more than once; offsets wrong
        reply["claims"][2],
    ]
    drafts, decisions = await extract(server, reply)
    assert [d.source_span for d in drafts] == [REVENUE]
    omitted = [(d.kind, d.reason) for d in decisions if d.kind == "claimify_omitted"]
    assert omitted == [("claimify_omitted", "span_not_found")] * 2
    for decision in decisions:
        assert P_START <= decision.char_start <= decision.char_end <= P_END


async def test_the_gate_rejects_invented_words_numbers_and_dates(server: FakeOpenAI) -> None:
    reply = good_reply()
    reply["claims"][0]["claim_text"] = "Ravi said that the payments migration moves from June 2026 to October 2026."
    reply["claims"][1]["claim_text"] = "Dana agreed on 2026-09-15 to tell finance."
    reply["claims"][2]["claim_text"] = "Revenue fell 15% in Q2 2026."
    drafts, decisions = await extract(server, reply)
    assert len(drafts) == 3  # the provider passes them on: it is not the judge
    kept, ledger = ground(ITEM, drafts, decisions)
    assert kept == []
    rejected = [(d.reason, DOC[d.char_start:d.char_end]) for d in ledger if d.kind == "grounding_rejected"]
    assert rejected == [("invented_word", RAVI), ("date_not_recorded", DANA), ("number_not_in_source", REVENUE)]


async def test_time_bounds_are_parsed_strictly(server: FakeOpenAI) -> None:
    reply = good_reply()
    reply["claims"][0].update(valid_from="2026-09-16T10:00:00", valid_until=None)  # naive: refused
    reply["claims"][1].update(valid_from="2026-02-30", valid_until="2026-02-30")  # impossible day
    reply["claims"][2].update(valid_from="2026-04-01T10:00:00+02:00", valid_until="2026-06-30T23:00:00Z",
                              valid_precision="instant")
    drafts, decisions = await extract(server, reply)
    assert [d.source_span for d in drafts] == [REVENUE]
    assert drafts[0].valid_from == datetime(2026, 4, 1, 8, tzinfo=UTC)
    assert drafts[0].valid_until == datetime(2026, 6, 30, 23, tzinfo=UTC)
    assert all(b.utcoffset() is not None and not b.utcoffset() for b in (drafts[0].valid_from, drafts[0].valid_until))
    assert [d.reason for d in decisions if d.kind == "claimify_omitted"] == ["invalid_time_window"] * 2
    for bad in ("17 September 2026", "2026-09-16 10:00", "2026-9-16", ""):
        with pytest.raises(ValueError):
            parse_bound(bad)


# ------------------------------------------------------------------------ broken replies


def _without(path: tuple[Any, ...]) -> dict[str, Any]:
    reply = good_reply()
    target: Any = reply
    for key in path[:-1]:
        target = target[key]
    del target[path[-1]]
    return reply


def _with(path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    reply = good_reply()
    target: Any = reply
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return reply


BROKEN_REPLIES = {
    "not json": '{"dropped": [], "claims": [',
    "not an object": json.dumps([good_reply()]),
    "missing top-level field": _without(("omitted",)),
    "missing claim field": _without(("claims", 1, "valid_precision")),
    "offset as string": _with(("claims", 0, "start"), "12"),
    "offset as boolean": _with(("claims", 0, "end"), True),
    "offset as float": _with(("claims", 0, "end"), 12.5),
    "flag not a list": _with(("claims", 2, "flags"), "hedged"),
    "drop reason off the list": _with(("dropped", 0, "reason"), "rude"),
    "unknown precision": _with(("claims", 0, "valid_precision"), "week"),
    "kind neither enum nor null": _with(("claims", 0, "valid_kind"), 3),
}


@pytest.mark.parametrize("name", list(BROKEN_REPLIES))
async def test_a_reply_that_breaks_the_schema_is_a_retryable_extraction_failure(server: FakeOpenAI, name: str) -> None:
    calls: list[ChatCall] = []
    error = await failure(server, reply=BROKEN_REPLIES[name], calls=calls)
    assert (error.reason, error.permanent) == ("extraction_failed", False)
    assert [c.outcome for c in calls] == ["malformed"]
    assert calls[0].tokens_in > 0  # the tokens were spent all the same


@pytest.mark.parametrize("mode", ["malformed", "bad_shape"])
async def test_a_body_that_is_not_a_chat_completion_is_an_extraction_failure(server: FakeOpenAI, mode: str) -> None:
    error = await failure(server, mode)
    assert (error.reason, error.permanent) == ("extraction_failed", False)


# ------------------------------------------------------------------------ transport failures


async def test_rate_limited_is_unavailable_with_retry_after(server: FakeOpenAI) -> None:
    calls: list[ChatCall] = []
    error = await failure(server, "rate_limited", calls=calls)
    assert (error.reason, error.permanent, error.retry_after_s) == ("provider_unavailable", False, 2.0)
    assert [c.outcome for c in calls] == ["rate_limited"]


async def test_server_error_is_unavailable(server: FakeOpenAI) -> None:
    error = await failure(server, "server_error")
    assert (error.reason, error.permanent, error.retry_after_s) == ("provider_unavailable", False, None)


@pytest.mark.parametrize("mode", ["unauthorized", "bad_request"])
async def test_client_errors_are_permanent_rejections(server: FakeOpenAI, mode: str) -> None:
    calls: list[ChatCall] = []
    error = await failure(server, mode, calls=calls)
    assert (error.reason, error.permanent) == ("provider_rejected", True)
    assert [c.outcome for c in calls] == ["client_error"]
    if mode == "unauthorized":
        assert "401" in str(error) and "sk-test" not in str(error)


async def test_a_refusal_is_a_permanent_rejection(server: FakeOpenAI) -> None:
    error = await failure(server, "refusal")
    assert (error.reason, error.permanent) == ("provider_rejected", True)


async def test_a_hanging_server_times_out_as_unavailable(server: FakeOpenAI) -> None:
    calls: list[ChatCall] = []
    error = await failure(server, "hang", calls=calls, timeout_s=0.5)
    assert (error.reason, error.permanent) == ("provider_unavailable", False)
    assert [c.outcome for c in calls] == ["timeout"]
    assert calls[0].latency_ms < 5000


async def test_an_unreachable_server_is_unavailable() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    calls: list[ChatCall] = []
    async with OpenAIClaimProvider(f"http://127.0.0.1:{port}/v1", "sk-test", "test-chat", timeout_s=2,
                                   on_call=calls.append) as provider:
        with pytest.raises(StageFailure) as caught:
            await provider.extract(ITEM)
    assert (caught.value.reason, caught.value.permanent) == ("provider_unavailable", False)
    assert [c.outcome for c in calls] == ["unreachable"]


# ------------------------------------------------------------------------ the request and the ledger


def _assert_strict(schema: dict[str, Any], path: str = "$") -> None:
    """What OpenAI's strict structured outputs demand: closed objects with every property required."""
    if "anyOf" in schema:
        for option in schema["anyOf"]:
            _assert_strict(option, path)
        return
    if schema.get("type") == "object":
        assert schema["additionalProperties"] is False, path
        assert sorted(schema["required"]) == sorted(schema["properties"]), path
        for key, sub in schema["properties"].items():
            _assert_strict(sub, f"{path}.{key}")
    if schema.get("type") == "array":
        _assert_strict(schema["items"], f"{path}[]")


async def test_the_request_carries_schema_temperature_key_and_context(server: FakeOpenAI) -> None:
    await extract(server, good_reply())
    (request,) = server.requests
    assert request.path == CHAT_PATH
    assert request.headers["Authorization"] == "Bearer sk-test"
    body = request.body
    assert body["model"] == "test-chat"
    assert body["temperature"] == 0
    assert body["response_format"]["type"] == "json_schema"
    spec = body["response_format"]["json_schema"]
    assert (spec["name"], spec["strict"]) == ("claims", True)
    assert spec["schema"] == json.loads(json.dumps(CLAIMS_SCHEMA))
    _assert_strict(spec["schema"])
    claim_item = spec["schema"]["properties"]["claims"]["items"]["properties"]
    assert claim_item["valid_precision"]["enum"] == ["unknown", "instant", "day", "month", "quarter", "year", "open"]

    system, user = body["messages"]
    assert system["role"] == "system" and user["role"] == "user"
    for phrase in ("SELECTION", "CLAIMIFY", "question", "hypothetical", "advice", "generic", "opinion",
                   "INTO THE PASSAGE", "SAID-ON", "unknown"):
        assert phrase in system["content"], phrase
    assert PASSAGE_TEXT not in system["content"]
    content = user["content"]
    assert f"<passage>\n{PASSAGE_TEXT}\n</passage>" in content
    assert f"Passage offset in the document: {P_START}" in content
    assert f"Document title: {TITLE}" in content
    assert "Said on: 2026-09-17T09:30:00Z (Thursday)" in content
    assert "Date: 17 September 2026" in content  # the surrounding text before the passage
    assert "Next steps are in the tracker." in content  # and after it


async def test_on_call_gets_tokens_and_outcome_never_the_text(server: FakeOpenAI) -> None:
    calls: list[ChatCall] = []
    await extract(server, good_reply(), calls)
    await failure(server, "server_error", calls=calls)
    assert [c.outcome for c in calls] == ["ok", "server_error"]
    ok = calls[0]
    assert (ok.provider, ok.model) == ("openai", "test-chat")
    assert ok.tokens_in > 100 and ok.tokens_out > 10 and ok.latency_ms >= 0
    assert (calls[1].tokens_in, calls[1].tokens_out) == (0, 0)
    assert {f.name for f in dataclasses.fields(ChatCall)} == {
        "provider", "model", "tokens_in", "tokens_out", "latency_ms", "outcome"}
    for call in calls:
        assert not any(isinstance(v, str) and len(v) > 20 for v in dataclasses.astuple(call))
        assert "Ravi" not in repr(call) and "finance" not in repr(call)


async def test_an_async_or_failing_ledger_callback_does_not_break_extraction(server: FakeOpenAI) -> None:
    seen: list[str] = []

    async def record(call: ChatCall) -> None:
        seen.append(call.outcome)
        raise RuntimeError("ledger down")

    server.reply_with(good_reply())
    async with OpenAIClaimProvider(server.base_url, "sk-test", "test-chat", on_call=record) as provider:
        drafts, _ = await provider.extract(ITEM)
    assert len(drafts) == 3 and seen == ["ok"]


async def test_an_empty_reply_is_no_claims(server: FakeOpenAI) -> None:
    drafts, decisions = await extract(server, {"dropped": [], "omitted": [], "claims": []})
    assert (drafts, decisions) == ([], [])
    assert copy.deepcopy(good_reply()) == good_reply()  # fixtures are fresh per call
