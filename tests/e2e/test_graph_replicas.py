"""Retrieval's calls to graph spread over every graph replica behind one address (round-robin,
services/platform/channels.py): two real graph processes, one comma-list target."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from services.platform.channels import target
from services.retrieval.graph_client import GrpcGraphExpansion
from tests.support import run_service


def test_calls_to_graph_reach_both_replicas(dsn: str, tmp_path: Path) -> None:
    with run_service("graph", dsn, tmp_path) as first, run_service("graph", dsn, tmp_path) as second:
        async def call() -> None:
            graph = GrpcGraphExpansion(f"{first.address},{second.address}")
            try:
                for _ in range(10):
                    entities, _truncated = await graph.expand([], [uuid.uuid4()], 1, None, None)
                    assert entities == []  # an unknown anchor expands to nothing
            finally:
                await graph.close()
        asyncio.run(call())
        served = [sum(1 for line in p.log_lines() if str(line.get("method", "")).endswith("/ExpandEntities"))
                  for p in (first, second)]
    assert sum(served) == 10 and min(served) >= 3, served  # round-robin: 5 and 5 once both are connected


def test_addresses_are_checked_and_lists_resolved() -> None:
    assert target("dns:///testament-graph:7004") == "dns:///testament-graph:7004"
    assert target("graph:7004") == "graph:7004"
    assert target("127.0.0.1:7004, localhost:7005") == "ipv4:127.0.0.1:7004,127.0.0.1:7005"
    assert target("[::1]:7004,[::1]:7005") == "ipv6:[::1]:7004,[::1]:7005"
    for bad, says in (("graph", "not host:port"), ("graph:7004,", "empty entry"), ("graph:99999", "not host:port"),
                      ("127.0.0.1:1,[::1]:2", "mixes")):
        with pytest.raises(ValueError, match=says):
            target(bad)
