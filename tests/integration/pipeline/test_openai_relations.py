"""The ``openai`` relation provider against a real local HTTP server (fake_openai.py) speaking the
chat-completions API: reply → assertion drafts, per-assertion drops with reasons, a reply that
breaks the schema fails whole (never half-written), failure classification, the request and
the cost ledger."""

from __future__ import annotations

import json
import socket
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from services.pipeline.adapters.openai_chat import ChatCall
from services.pipeline.adapters.openai_relations import OpenAIRelationProvider, assertions_schema
from services.pipeline.domain.facts import CORE_PREDICATES, WORK_PACK, AssertionDraft, ClaimView, RelationProvider
from services.pipeline.domain.work import StageFailure

from .fake_openai import CHAT_PATH, FakeOpenAI


def view(text: str, attributed_to: str | None = None) -> ClaimView:
    return ClaimView(str(uuid.uuid4()), text, attributed_to is not None, attributed_to, None, None, "unknown", None,
                     None)


RAVI = view("Ravi works on the billing migration.")
SPONSOR = view("Northwind sponsors the billing migration.")
DANA = view("Dana believes the June date is too tight.", attributed_to="Dana")
CUTOVER = view("The billing migration cutover moved from 8 June to 9 June.")
MOVED = view("Ravi moved from the billing migration to the search team.")
CLAIMS = [RAVI, SPONSOR, DANA, CUTOVER, MOVED]  # DANA is settled locally: the batch is c1..c4


def relation(subject: str, predicate: str | None, obj: str | None, **fields: Any) -> dict[str, Any]:
    value: dict[str, Any] = {"kind": "relation", "subject": subject, "predicate": predicate, "object": obj,
                             "change_kind": "none", "previous_object": None, "previous_value": None,
                             "previous_holder": None, "attribute": None, "value": None, "value_is_state": False,
                             "mood": "fact", "hedged": False}
    value.update(fields)
    return value


def observation(subject: str, **fields: Any) -> dict[str, Any]:
    return relation(subject, None, None, kind="observation", **fields)


def good_reply() -> dict[str, Any]:
    return {"results": [  # out of order on purpose: answers are matched by id
        {"claim_id": "c4", "assertions": [
            relation("Ravi", "works_on", "search team", change_kind="succession",
                     previous_object="the billing migration")]},
        {"claim_id": "c1", "assertions": [relation("Ravi", "works_on", "the billing migration")]},
        {"claim_id": "c3", "assertions": [
            observation("billing migration cutover", change_kind="correction", previous_value="8 June")]},
        {"claim_id": "c2", "assertions": [relation("Northwind", "other:sponsors", "billing migration")]},
    ]}


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


@pytest.fixture()
def server(fake: FakeOpenAI) -> FakeOpenAI:
    fake.reset()
    return fake


def provider_for(server: FakeOpenAI, calls: list[ChatCall] | None = None, **kwargs: Any) -> OpenAIRelationProvider:
    settings: dict[str, Any] = {"timeout_s": 5.0}
    settings.update(kwargs)
    return OpenAIRelationProvider(server.base_url, "sk-test", "test-chat",
                                  on_call=(calls if calls is not None else []).append, **settings)


async def normalize(server: FakeOpenAI, claims: list[ClaimView], *replies: Any,
                    aliases: frozenset[str] = frozenset(), calls: list[ChatCall] | None = None,
                    **kwargs: Any) -> list[tuple[list[AssertionDraft], str | None]]:
    server.reply_with(*replies)
    async with provider_for(server, calls, **kwargs) as provider:
        return await provider.normalize(claims, aliases)


async def failure(server: FakeOpenAI, *modes: str, replies: tuple[Any, ...] = (), claims: list[ClaimView] | None = None,
                  calls: list[ChatCall] | None = None, **kwargs: Any) -> StageFailure:
    server.script(*modes)  # type: ignore[arg-type]
    server.reply_with(*replies)
    async with provider_for(server, calls, **kwargs) as provider:
        with pytest.raises(StageFailure) as caught:
            await provider.normalize(claims or CLAIMS, frozenset())
    return caught.value


# ------------------------------------------------------------------------ good replies


async def test_good_reply_becomes_drafts_in_claim_order(server: FakeOpenAI) -> None:
    results = await normalize(server, CLAIMS, good_reply())
    assert results == [
        ([AssertionDraft("relation", "Ravi", predicate="works_on", object="billing migration")], None),
        ([AssertionDraft("relation", "Northwind", predicate="other:sponsors", object="billing migration")], None),
        ([AssertionDraft("observation", "Dana", statement=DANA.claim_text, features={"stance_of": "Dana"})], None),
        ([AssertionDraft("observation", "billing migration cutover", statement=CUTOVER.claim_text,
                         change_kind="correction", previous_value="8 June")], None),
        ([AssertionDraft("relation", "Ravi", predicate="works_on", object="billing migration",
                         features={"until_claim": True}),  # what held until the move, as the parse reads it
          AssertionDraft("relation", "Ravi", predicate="works_on", object="search team", change_kind="succession",
                         previous_object="billing migration")], None),
    ]
    assert len(server.requests) == 1  # one batch; the attributed claim needed no model call


async def test_a_hedged_relation_is_a_flagged_observation_never_state(server: FakeOpenAI) -> None:
    # the parse reading's rule: "maybe Victor leads it" is kept as what was said, not as a fact
    maybe = view("Maybe Victor leads the data quality review.")
    reply = {"results": [{"claim_id": "c1", "assertions": [
        relation("Victor", "other:leads", "the data quality review", hedged=True)]}]}
    [(drafts, reason)] = await normalize(server, [maybe], reply)
    assert reason is None and [(d.kind, d.subject, d.predicate, d.statement) for d in drafts] == [
        ("observation", "Victor", None, maybe.claim_text)]
    assert drafts[0].features["hedged"] is True and "kind" not in drafts[0].features


async def test_provider_identity(server: FakeOpenAI) -> None:
    async with provider_for(server) as provider:
        checked: RelationProvider = provider
        assert (checked.name, checked.version) == ("openai", "openai-normalizer/test-chat/2")
        assert "sk-test" not in repr(provider)


async def test_an_attributed_claim_is_always_a_stance_of_its_holder(server: FakeOpenAI) -> None:
    said = view("Priya said that Ravi works on the billing migration.", attributed_to="Priya")
    nobody = view("It was said that the launch slipped.", attributed_to="it")
    results = await normalize(server, [said, nobody])
    assert results == [
        ([AssertionDraft("observation", "Priya", statement=said.claim_text, features={"stance_of": "Priya"})], None),
        ([], "no_entity"),
    ]
    assert server.requests == []


async def test_no_claims_no_call(server: FakeOpenAI) -> None:
    assert await normalize(server, []) == []
    assert server.requests == []


# ------------------------------------------------------------------------ drops


async def test_bad_assertions_are_dropped_with_reasons_and_the_rest_stands(server: FakeOpenAI) -> None:
    admires = view("Ravi admires Dana.")
    system = view("The system uses Postgres.")
    mixed = view("Dana reports to Priya and admires Ravi.")
    invented = view("Ravi works on the billing migration.")
    nothing = view("It rained.")
    dated = view("Kickoff happened on 14 January 2026.")
    reply = {"results": [
        {"claim_id": "c1", "assertions": [relation("Ravi", "admires", "Dana")]},
        {"claim_id": "c2", "assertions": [relation("system", "uses", "Postgres")]},
        {"claim_id": "c3", "assertions": [relation("Dana", "reports_to", "Priya"),
                                          relation("Dana", "Admires", "Ravi"),
                                          relation("Dana", "reports_to", "Priya")]},  # a repeat counts once
        {"claim_id": "c4", "assertions": [relation("Ravi", "works_on", "Project Phoenix")]},
        {"claim_id": "c5", "assertions": []},
        {"claim_id": "c6", "assertions": [relation("Kickoff", "participated_in", "14 January 2026"),
                                          observation("Kickoff")]},
    ]}
    results = await normalize(server, [admires, system, mixed, invented, nothing, dated], reply)
    assert results == [
        ([], "invalid_predicate"),
        ([], "no_entity"),
        ([AssertionDraft("relation", "Dana", predicate="reports_to", object="Priya")], None),
        ([], "name_not_in_claim"),
        ([], "no_entity"),
        ([AssertionDraft("observation", "Kickoff", statement=dated.claim_text)], None),
    ]


async def test_previous_object_and_value_must_be_in_the_claim(server: FakeOpenAI) -> None:
    claim = view("Ravi moved to the search team.")
    reply = {"results": [{"claim_id": "c1", "assertions": [
        relation("Ravi", "works_on", "search team", change_kind="succession", previous_object="billing migration",
                 previous_value="May")]}]}
    [(drafts, reason)] = await normalize(server, [claim], reply)
    assert reason is None
    assert (drafts[0].previous_object, drafts[0].previous_value, drafts[0].change_kind) == (None, None, "succession")


# ------------------------------------------------------------------------ replies that break the schema


def _without(reply: dict[str, Any], claim_id: str) -> dict[str, Any]:
    return {"results": [r for r in reply["results"] if r["claim_id"] != claim_id]}


BROKEN: dict[str, Any] = {
    "missing_id": _without(good_reply(), "c3"),
    "extra_id": {"results": [*good_reply()["results"], {"claim_id": "c9", "assertions": []}]},
    "repeated_id": {"results": [*good_reply()["results"], good_reply()["results"][0]]},
    "not_json": '{"results": [{"claim_id": "c1", ',
    "no_results": {"claims": []},
    "unknown_key": {"results": [{**r, "confidence": 1} for r in good_reply()["results"]]},
    "bad_change_kind": {"results": [{"claim_id": r["claim_id"], "assertions": [
        {**a, "change_kind": "maybe"} for a in r["assertions"]]} for r in good_reply()["results"]]},
    "missing_field": {"results": [{"claim_id": r["claim_id"], "assertions": [
        {k: v for k, v in a.items() if k != "previous_value"} for a in r["assertions"]]}
        for r in good_reply()["results"]]},
    "null_subject": {"results": [{"claim_id": r["claim_id"], "assertions": [
        {**a, "subject": None} for a in r["assertions"]]} for r in good_reply()["results"]]},
}


@pytest.mark.parametrize("name", sorted(BROKEN))
async def test_a_reply_that_breaks_the_schema_fails_whole_and_retryably(server: FakeOpenAI, name: str) -> None:
    calls: list[ChatCall] = []
    error = await failure(server, replies=(BROKEN[name],), calls=calls)
    assert (error.reason, error.permanent) == ("extraction_failed", False)
    assert [c.outcome for c in calls] == ["malformed"]


@pytest.mark.parametrize("mode", ["malformed", "bad_shape"])
async def test_a_body_that_is_not_a_chat_completion_is_an_extraction_failure(server: FakeOpenAI, mode: str) -> None:
    error = await failure(server, mode)
    assert (error.reason, error.permanent) == ("extraction_failed", False)


async def test_a_later_batch_breaking_the_schema_returns_nothing(server: FakeOpenAI) -> None:
    first = {"results": [{"claim_id": "c1", "assertions": [relation("Ravi", "works_on", "billing migration")]},
                         {"claim_id": "c2", "assertions": [relation("Northwind", "other:sponsors",
                                                                    "billing migration")]}]}
    error = await failure(server, replies=(first, {"results": []}), batch_size=2)
    assert error.reason == "extraction_failed"
    assert len(server.requests) == 2


# ------------------------------------------------------------------------ HTTP failures


async def test_rate_limited_is_unavailable_with_retry_after(server: FakeOpenAI) -> None:
    calls: list[ChatCall] = []
    error = await failure(server, "rate_limited", calls=calls)
    assert (error.reason, error.permanent, error.retry_after_s) == ("provider_unavailable", False, 2.0)
    assert [c.outcome for c in calls] == ["rate_limited"]


async def test_server_error_is_unavailable(server: FakeOpenAI) -> None:
    error = await failure(server, "server_error")
    assert (error.reason, error.permanent) == ("provider_unavailable", False)


@pytest.mark.parametrize("mode", ["unauthorized", "bad_request", "refusal"])
async def test_rejections_are_permanent(server: FakeOpenAI, mode: str) -> None:
    error = await failure(server, mode)
    assert (error.reason, error.permanent) == ("provider_rejected", True)
    if mode == "unauthorized":
        assert "Incorrect API key" in str(error) and "sk-test" not in str(error)


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
    async with OpenAIRelationProvider(f"http://127.0.0.1:{port}/v1", "sk-test", "test-chat", timeout_s=2,
                                      on_call=calls.append) as provider:
        with pytest.raises(StageFailure) as caught:
            await provider.normalize([RAVI], frozenset())
    assert (caught.value.reason, caught.value.permanent) == ("provider_unavailable", False)
    assert [c.outcome for c in calls] == ["unreachable"]


# ------------------------------------------------------------------------ the request and the ledger


def _assert_strict(schema: dict[str, Any], path: str = "$") -> None:
    """What OpenAI's strict structured outputs demand: closed objects with every property required."""
    if schema.get("type") == "object":
        assert schema["additionalProperties"] is False, path
        assert sorted(schema["required"]) == sorted(schema["properties"]), path
        for key, sub in schema["properties"].items():
            _assert_strict(sub, f"{path}.{key}")
    if schema.get("type") == "array":
        _assert_strict(schema["items"], f"{path}[]")


async def test_the_request_carries_schema_temperature_key_vocabulary_and_aliases(server: FakeOpenAI) -> None:
    aliases = frozenset({"billing migration", "ravi", "unrelated project"})
    await normalize(server, CLAIMS, good_reply(), aliases=aliases)
    [request] = server.requests
    assert request.path == CHAT_PATH
    assert request.headers["Authorization"] == "Bearer sk-test"
    body = request.body
    assert (body["model"], body["temperature"]) == ("test-chat", 0)
    response_format = body["response_format"]
    assert response_format["type"] == "json_schema"
    assert (response_format["json_schema"]["name"], response_format["json_schema"]["strict"]) == ("assertions", True)
    schema = response_format["json_schema"]["schema"]
    assert schema == assertions_schema(["c1", "c2", "c3", "c4"])
    _assert_strict(schema)
    system, user = body["messages"]
    assert system["role"] == "system" and user["role"] == "user"
    for predicate in (*CORE_PREDICATES, *WORK_PACK):
        assert predicate in system["content"]
    assert "other:<snake_case>" in system["content"] and "attributed" in system["content"]
    lines = [json.loads(line) for line in user["content"].splitlines() if line.startswith("{")]
    assert lines == [{"id": "c1", "text": RAVI.claim_text}, {"id": "c2", "text": SPONSOR.claim_text},
                     {"id": "c3", "text": CUTOVER.claim_text}, {"id": "c4", "text": MOVED.claim_text}]
    assert '["billing migration", "ravi"]' in user["content"]  # known names the claims mention, not the others
    assert DANA.claim_text not in json.dumps(body)


async def test_batches_carry_names_found_earlier(server: FakeOpenAI) -> None:
    first = view("Ravi joined the search team.")
    second = view("The search team ships weekly.")
    replies = ({"results": [{"claim_id": "c1", "assertions": [relation("Ravi", "works_on", "search team")]}]},
               {"results": [{"claim_id": "c1", "assertions": [observation("search team")]}]})
    results = await normalize(server, [first, second], *replies, batch_size=1)
    assert [r[1] for r in results] == [None, None]
    assert len(server.requests) == 2
    assert '"search team"' in server.requests[1].body["messages"][1]["content"]


async def test_on_call_gets_tokens_and_outcome_never_the_text(server: FakeOpenAI) -> None:
    calls: list[ChatCall] = []
    await normalize(server, CLAIMS, good_reply(), calls=calls)
    [call] = calls
    assert (call.provider, call.model, call.outcome) == ("openai", "test-chat", "ok")
    assert call.tokens_in > 0 and call.tokens_out > 0 and call.latency_ms >= 0
    recorded = repr(calls)
    for claim in CLAIMS:
        assert claim.claim_text not in recorded
    for word in ("Ravi", "Northwind", "billing", "cutover"):
        assert word not in recorded


async def test_an_async_or_failing_ledger_callback_does_not_break_normalisation(server: FakeOpenAI) -> None:
    seen: list[ChatCall] = []

    async def ledger(call: ChatCall) -> None:
        seen.append(call)

    def broken(call: ChatCall) -> None:
        raise RuntimeError("ledger down")

    for callback in (ledger, broken):
        server.reply_with(good_reply())
        async with OpenAIRelationProvider(server.base_url, "sk-test", "test-chat", on_call=callback) as provider:
            results = await provider.normalize(CLAIMS, frozenset())
        assert all(reason is None for _, reason in results)
    assert [c.outcome for c in seen] == ["ok"]
