"""The OpenAI-compatible relation provider makes the structure the parse makes and passes
through the same engine rules: a model server in its own process (real HTTP) answers what a
faithful model would say about the issue's sentences, and the facts, windows and labels held
afterwards are the ones the offline parse normaliser leads to."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench._extraction import Extractor, Memory, read_document, snapshot
from services.pipeline.adapters.openai_relations import OpenAIRelationProvider
from services.pipeline.domain.claims import ParsedClaimProvider
from services.pipeline.domain.facts import ParseRelationProvider

SERVER = Path(__file__).with_name("openai_chat_process.py")
DOCS = [
    (dt.datetime(2025, 11, 3, 9, tzinfo=dt.UTC),
     "# Ops\n\nLena Park leads the on-call rotation for Orion.\nThe Orion database is hosted in Frankfurt.\n"
     "The Q3 marketing budget is 120,000 EUR.\n"),
    (dt.datetime(2026, 7, 16, 9, tzinfo=dt.UTC),
     "# Ops\n\nAs of 1 January 2026, Kofi Mensah took over the on-call rotation for Orion from Lena Park.\n"
     "We migrated the Orion database from Frankfurt to Dublin on 20 February 2026.\n"
     "Finance cut the Q3 marketing budget to 90,000 EUR on 15 July 2026.\n"
     "Jonas Weber stepped down as lead of the payments squad on 31 March 2026.\n"
     "Olga will take over the support rota next month.\n"),
]


def a(kind: str, subject: str, predicate: str | None = None, obj: str | None = None, **fields: object) -> dict:
    value = {"kind": kind, "subject": subject, "predicate": predicate, "object": obj, "change_kind": "none",
             "previous_object": None, "previous_value": None, "previous_holder": None, "attribute": None,
             "value": None, "value_is_state": False, "mood": "fact", "hedged": False}
    value.update(fields)
    return value


def results(*per_claim: list[dict]) -> dict:
    return {"results": [{"claim_id": f"c{i}", "assertions": list(x)} for i, x in enumerate(per_claim, 1)]}


# What a faithful model answers, one reply per document (one batch each).
REPLIES = [
    results([a("relation", "Lena Park", "other:leads", "on-call rotation for Orion")],
            [a("relation", "Orion database", "located_in", "Frankfurt")],
            [a("observation", "Q3 marketing budget", attribute="Q3 marketing budget", value="120,000 EUR",
               value_is_state=True)]),
    results([a("relation", "Kofi Mensah", "other:leads", "on-call rotation for Orion", change_kind="succession",
               previous_holder="Lena Park")],
            [a("relation", "Orion database", "located_in", "Dublin", change_kind="succession",
               previous_object="Frankfurt")],
            [a("observation", "Q3 marketing budget", change_kind="succession", attribute="Q3 marketing budget",
               value="90,000 EUR", value_is_state=True)],
            [a("relation", "Jonas Weber", "other:leads", "payments squad", change_kind="end")],
            [a("observation", "Olga", mood="plan")]),
]


@pytest.fixture()
def model_server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    replies = tmp_path / "replies.json"
    replies.write_text(json.dumps(REPLIES))
    process = subprocess.Popen([sys.executable, str(SERVER), str(replies)], stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        port = int(process.stdout.readline())
        yield f"http://127.0.0.1:{port}/v1", Path(str(replies) + ".requests")
    finally:
        process.terminate()
        process.wait(timeout=10)


async def _run(extractor: Extractor) -> Memory:
    memory = Memory()
    for said_on, text in DOCS:
        await read_document(extractor, text, said_on, memory)
    return memory


async def test_the_model_path_holds_what_the_parse_path_holds(model_server: tuple[str, Path]) -> None:
    base_url, requests = model_server
    parsed = await _run(Extractor("parse", ParsedClaimProvider(), ParseRelationProvider()))
    async with OpenAIRelationProvider(base_url, "sk-test", "local-model", timeout_s=10) as provider:
        modelled = await _run(Extractor("openai", ParsedClaimProvider(), provider))
    assert len(requests.read_text().splitlines()) == 2  # one chat call per document, over HTTP
    assert snapshot(modelled) == snapshot(parsed)
    current = {label for label in modelled.current()}
    assert "Kofi Mensah leads on-call rotation for Orion" in current
    assert "Orion database is located in Dublin" in current
    assert "Q3 marketing budget: 90,000 EUR" in current
    assert not {"Lena Park leads on-call rotation for Orion", "Q3 marketing budget: 120,000 EUR",
                "Jonas Weber leads payments squad"} & current
    assert not any("Olga" in label for label in current)  # a plan is no state
