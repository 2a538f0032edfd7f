"""`GET /openapi.json` describes what the gateway answers: schemathesis fuzzes every route
against a running stack and finds no 5xx and no response that breaks its schema."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from openapi_spec_validator import validate

from tests.conftest import clone_database
from tests.support import gateway_stack

EXAMPLES = os.environ.get("TESTAMENT_FUZZ_EXAMPLES", "8")


@pytest.fixture(scope="module")
def base(pg, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with gateway_stack(clone_database(pg), tmp_path_factory.mktemp("openapi"),
                       ("ingest", "pipeline", "retrieval", "queryspace")) as (url, _, _):
        httpx.post(f"{url}/ingest", params={"filename": "a.md", "mime": "text/markdown"},
                   content=b"# Notes\n\nRavi owns the exporter.\n", timeout=30)
        yield url


def test_the_document_is_valid_openapi_3_1_and_names_every_route(base: str) -> None:
    spec = httpx.get(f"{base}/openapi.json", timeout=30).json()
    validate(spec)
    assert spec["openapi"] == "3.1.0"
    for path in ("/ingest", "/documents", "/documents/{doc_id}", "/operations/{name}", "/resolve",
                 "/search/claims", "/graph/neighborhood", "/query/sql", "/deployment"):
        assert path in spec["paths"], path
    assert "/healthz" not in spec["paths"]  # RememberStack leaves it out of the document
    assert spec["paths"]["/documents/{doc_id}"]["delete"]["parameters"][0]["in"] == "path"


def test_schemathesis_finds_no_server_error_and_no_response_outside_the_schema(base: str, tmp_path: Path) -> None:
    result = subprocess.run(
        [str(Path(sys.executable).with_name("schemathesis")), "run", f"{base}/openapi.json",
         "--checks", "not_a_server_error,response_schema_conformance,content_type_conformance",
         "--max-examples", EXAMPLES, "--generation-deterministic", "--workers", "2",
         "--request-timeout", "30", "--suppress-health-check", "all"],
        capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
