"""Converters: bytes of an uploaded document → Markdown.

A converter is chosen per MIME type by the conversion routes
(:mod:`services.platform.conversion`). Every failure is reported as
:class:`ConversionFailed` with a reason from a fixed vocabulary, so the convert
stage can record it and decide whether to retry: only a timeout is worth
retrying; the other reasons are properties of the bytes and are permanent.

``MarkItDownConverter`` runs markitdown in a worker thread from an in-memory
stream (nothing is written to disk). A timeout stops the wait, not the thread:
Python cannot kill a thread, so a runaway conversion keeps its worker until it
returns, and its result is discarded.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import importlib.util
import io
import os
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol, runtime_checkable

if TYPE_CHECKING:
    from markitdown import MarkItDown

ConversionFailureReason = Literal[
    "invalid_utf8",
    "empty_document",
    "unreadable_file",
    "conversion_error",
    "conversion_timeout",
]

REASONS: Final[frozenset[str]] = frozenset(
    {"invalid_utf8", "empty_document", "unreadable_file", "conversion_error", "conversion_timeout"}
)
_TRANSIENT: Final[frozenset[str]] = frozenset({"conversion_timeout"})
_DETAIL_MAX: Final = 500

DEFAULT_TIMEOUT_S: Final = 120.0

# The extension hint markitdown needs for each routed type when the filename has none.
MIME_EXTENSIONS: Final[Mapping[str, str]] = {
    "text/html": ".html",
    "application/xhtml+xml": ".html",
    "application/pdf": ".pdf",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": ".docx",
    "application/vnd.openxmlformats-officedocument.presentationml.presentation": ".pptx",
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet": ".xlsx",
}
_KNOWN_EXTENSIONS: Final[frozenset[str]] = frozenset({".html", ".htm", ".pdf", ".docx", ".pptx", ".xlsx"})


class ConversionFailed(Exception):
    """A document could not be turned into Markdown.

    ``reason`` is one of :data:`REASONS`; ``detail`` is a short human-readable
    explanation (never document text beyond an exception message);
    ``permanent`` is False only for a timeout.
    """

    def __init__(self, reason: ConversionFailureReason, detail: str = "") -> None:
        if reason not in REASONS:
            raise ValueError(f"unknown conversion failure reason {reason!r}")
        self.reason: ConversionFailureReason = reason
        self.detail: str = detail[:_DETAIL_MAX]
        self.permanent: bool = reason not in _TRANSIENT
        super().__init__(f"{reason}: {self.detail}" if self.detail else reason)


@runtime_checkable
class Converter(Protocol):
    name: str
    version: str

    async def convert(self, data: bytes, mime: str, filename: str) -> str:
        """The document as Markdown; raises :class:`ConversionFailed`."""
        ...


def _finish(markdown: str) -> str:
    """Line endings to LF and NULs dropped (PostgreSQL text cannot hold them); empty → failure."""
    text = markdown.replace("\r\n", "\n").replace("\r", "\n").replace("\x00", "")
    if not text.strip():
        raise ConversionFailed("empty_document", "the document has no text")
    return text


def _describe(exc: BaseException) -> str:
    message = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {message[0]}" if message else type(exc).__name__


class PassthroughConverter:
    """Markdown and plain text: the bytes are the Markdown, once decoded as strict UTF-8."""

    name: str = "passthrough"
    version: str = "1"

    async def convert(self, data: bytes, mime: str, filename: str) -> str:
        if not data:
            raise ConversionFailed("empty_document", "the document is empty")
        try:
            text = data.decode("utf-8-sig")  # strict; a leading BOM is dropped
        except UnicodeDecodeError as exc:
            raise ConversionFailed(
                "invalid_utf8", f"not valid UTF-8 at byte {exc.start}: {exc.reason}"
            ) from None
        return _finish(text)


def _markitdown_version() -> str:
    try:
        return importlib.metadata.version("markitdown")
    except importlib.metadata.PackageNotFoundError:
        return "unavailable"


def extension_hint(mime: str, filename: str) -> str | None:
    """The extension markitdown should assume: the filename's if it is one we route, else the MIME type's."""
    ext = os.path.splitext(filename or "")[1].lower()
    if ext in _KNOWN_EXTENSIONS:
        return ".html" if ext == ".htm" else ext
    return MIME_EXTENSIONS.get(mime.split(";", 1)[0].strip().lower())


class MarkItDownConverter:
    """HTML, DOCX, PPTX, XLSX and PDF (text layer only; no OCR) through markitdown.

    Only those five markitdown converters are registered: no plugins, no
    archives, nothing that reaches the network.
    """

    name: str = "markitdown"

    def __init__(self, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        if timeout_s <= 0:
            raise ValueError("timeout_s must be positive")
        if importlib.util.find_spec("markitdown") is None:
            raise RuntimeError("the markitdown converter needs 'markitdown[docx,pptx,xlsx,pdf]' installed")
        self.timeout_s = timeout_s
        self.version: str = _markitdown_version()
        self._local = threading.local()  # one MarkItDown per worker thread

    def _engine(self) -> MarkItDown:
        engine: MarkItDown | None = getattr(self._local, "engine", None)
        if engine is None:
            from markitdown import MarkItDown
            from markitdown.converters import (
                DocxConverter,
                HtmlConverter,
                PdfConverter,
                PptxConverter,
                XlsxConverter,
            )

            engine = MarkItDown(enable_builtins=False, enable_plugins=False)
            for converter in (HtmlConverter(), PdfConverter(), XlsxConverter(), PptxConverter(), DocxConverter()):
                engine.register_converter(converter)
            self._local.engine = engine
        return engine

    def _convert_sync(self, data: bytes, mime: str, filename: str) -> str:
        from markitdown import (
            FileConversionException,
            MissingDependencyException,
            StreamInfo,
            UnsupportedFormatException,
        )

        info = StreamInfo(
            mimetype=mime.split(";", 1)[0].strip().lower() or None,
            extension=extension_hint(mime, filename),
            filename=filename or None,
        )
        try:
            result: Any = self._engine().convert_stream(io.BytesIO(data), stream_info=info)
        except FileConversionException as exc:
            causes = [a.exc_info[1] for a in (exc.attempts or []) if a.exc_info is not None]
            if any(isinstance(c, MissingDependencyException) for c in causes):
                raise ConversionFailed("conversion_error", "a markitdown dependency is not installed") from exc
            detail = "; ".join(_describe(c) for c in causes) or _describe(exc)
            raise ConversionFailed("unreadable_file", detail) from exc
        except UnsupportedFormatException as exc:
            raise ConversionFailed("unreadable_file", f"no converter accepts {info.mimetype or filename!r}") from exc
        except MissingDependencyException as exc:
            raise ConversionFailed("conversion_error", _describe(exc)) from exc
        except Exception as exc:  # markitdown or a parser below it broke on these bytes
            raise ConversionFailed("conversion_error", _describe(exc)) from exc
        return _finish(result.markdown or "")

    async def convert(self, data: bytes, mime: str, filename: str) -> str:
        if not data:
            raise ConversionFailed("empty_document", "the document is empty")
        try:
            async with asyncio.timeout(self.timeout_s):
                return await asyncio.to_thread(self._convert_sync, data, mime, filename)
        except TimeoutError:
            raise ConversionFailed(
                "conversion_timeout", f"conversion took longer than {self.timeout_s:g} s"
            ) from None


CONVERTER_FACTORIES: Final[Mapping[str, type[PassthroughConverter] | type[MarkItDownConverter]]] = {
    "passthrough": PassthroughConverter,
    "markitdown": MarkItDownConverter,
}


def build_converters(
    routes: Mapping[str, str], *, markitdown_timeout_s: float = DEFAULT_TIMEOUT_S
) -> dict[str, Converter]:
    """MIME type → converter instance (one instance per converter name, shared across types)."""
    unknown = sorted({name for name in routes.values() if name not in CONVERTER_FACTORIES})
    if unknown:
        raise ValueError(f"unknown converter(s) {unknown}; known: {sorted(CONVERTER_FACTORIES)}")
    instances: dict[str, Converter] = {}
    built: dict[str, Converter] = {}
    for mime, name in routes.items():
        if name not in instances:
            instances[name] = (
                MarkItDownConverter(timeout_s=markitdown_timeout_s) if name == "markitdown" else PassthroughConverter()
            )
        built[mime] = instances[name]
    return built
