"""The default embedder is ready before a service says so: a retrieval process started on an
empty model cache unpacks the vocabulary and derives the int8 graph before it reports
SERVING, so the first query does not pay for it (issue #11, "models warm before ready")."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from services.platform.server import free_ports
from tests.support import REPO, service_env, wait_serving


def test_retrieval_derives_the_int8_graph_before_it_reports_serving(dsn: str, tmp: Path) -> None:
    cache = tmp / "models"
    (port,) = free_ports(1)
    env = service_env(dsn, TESTAMENT_RETRIEVAL_PORT=str(port), TESTAMENT_EMBEDDING_PROVIDER="minilm",
                      TESTAMENT_MODEL_CACHE=str(cache))
    with open(tmp / "retrieval.log", "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "services.retrieval"], cwd=REPO, env=env, stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        wait_serving(f"127.0.0.1:{port}", timeout_s=180, proc=proc)  # a first start derives the graph: load-bound
        derived = list(cache.glob("minilm-*-dynamic-int8-*.onnx"))
        assert len(derived) == 1 and derived[0].stat().st_size > 1_000_000
        assert list(cache.glob("all-MiniLM-L6-v2-*/tokenizer.json"))
        assert not list(cache.glob("tmp*"))  # no half-written graph left beside it
    finally:
        proc.terminate()
        proc.wait(30)
