"""Converters against real documents that the tests generate (no binary fixtures are committed)."""

from __future__ import annotations

import asyncio
import io
import os
import re
import tempfile
import time
from pathlib import Path

import pytest

from services.pipeline.adapters.converters import (
    ConversionFailed,
    Converter,
    MarkItDownConverter,
    PassthroughConverter,
    build_converters,
)
from services.platform.conversion import DEFAULT_ROUTES

DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
PPTX = "application/vnd.openxmlformats-officedocument.presentationml.presentation"
XLSX = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
PDF = "application/pdf"
HTML = "text/html"


def make_docx(heading: str, paragraphs: list[str], table: list[list[str]]) -> bytes:
    docx = pytest.importorskip("docx")
    document = docx.Document()
    document.add_heading(heading, level=1)
    for paragraph in paragraphs:
        document.add_paragraph(paragraph)
    grid = document.add_table(rows=len(table), cols=len(table[0]))
    for r, row in enumerate(table):
        for c, value in enumerate(row):
            grid.cell(r, c).text = value
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def make_pptx(slides: list[tuple[str, str]]) -> bytes:
    pptx = pytest.importorskip("pptx")
    deck = pptx.Presentation()
    for title, body in slides:
        slide = deck.slides.add_slide(deck.slide_layouts[1])  # title and content
        slide.shapes.title.text = title
        slide.placeholders[1].text = body
    out = io.BytesIO()
    deck.save(out)
    return out.getvalue()


def make_xlsx(title: str, rows: list[list[object]]) -> bytes:
    openpyxl = pytest.importorskip("openpyxl")
    book = openpyxl.Workbook()
    sheet = book.active
    sheet.title = title
    for row in rows:
        sheet.append(row)
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()


def make_pdf(lines: list[str]) -> bytes:
    pytest.importorskip("reportlab")
    from reportlab.lib.pagesizes import A4
    from reportlab.pdfgen import canvas

    out = io.BytesIO()
    page = canvas.Canvas(out, pagesize=A4)
    page.setFont("Helvetica", 12)
    y = 760
    for line in lines:
        page.drawString(72, y, line)  # real text objects: a text layer, not an image
        y -= 20
    page.showPage()
    page.save()
    return out.getvalue()


def assert_found(md: str, sentence: str) -> int:
    offset = md.index(sentence)
    assert md[offset:offset + len(sentence)] == sentence
    return offset


@pytest.fixture(scope="module")
def markitdown() -> MarkItDownConverter:
    pytest.importorskip("markitdown")
    return MarkItDownConverter()


# ------------------------------------------------------------------ formats


async def test_docx_heading_paragraphs_table(markitdown: MarkItDownConverter) -> None:
    first = "The lighthouse keeper counted forty-two ships before dawn."
    second = "Each ship was logged in the harbour master's green ledger."
    data = make_docx("Quarterly Harbour Findings", [first, second], [["Port", "Ships"], ["Dover", "42"]])
    md = await markitdown.convert(data, DOCX, "findings.docx")
    assert re.search(r"^#{1,6} Quarterly Harbour Findings$", md, re.MULTILINE), md
    assert assert_found(md, first) < assert_found(md, second)
    assert re.search(r"^\|\s*Dover\s*\|\s*42\s*\|$", md, re.MULTILINE), md


async def test_pptx_two_slides(markitdown: MarkItDownConverter) -> None:
    one = "Zebras migrate across the Serengeti every summer."
    two = "Penguins huddle together against the Antarctic wind."
    md = await markitdown.convert(make_pptx([("Migration", one), ("Huddling", two)]), PPTX, "deck.pptx")
    assert assert_found(md, one) < assert_found(md, two)
    assert "Migration" in md and "Huddling" in md


async def test_xlsx_sheet_as_table(markitdown: MarkItDownConverter) -> None:
    data = make_xlsx("Inventory", [["Item", "Quantity"], ["Brass telescope", 3], ["Copper kettle", 7]])
    md = await markitdown.convert(data, XLSX, "inventory.xlsx")
    assert "Inventory" in md
    assert_found(md, "Brass telescope")
    assert re.search(r"^\|\s*Copper kettle\s*\|\s*7\s*\|$", md, re.MULTILINE), md


async def test_html_headings_list_table(markitdown: MarkItDownConverter) -> None:
    sentence = "The heron waited motionless among the reeds."
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>Notes</title></head><body>
        <h1>Field Notes</h1><p>{sentence}</p>
        <h2>Birds seen</h2><ul><li>Grey heron</li><li>Kingfisher</li></ul>
        <table><tr><th>Bird</th><th>Count</th></tr><tr><td>Heron</td><td>1</td></tr></table>
        <p>Caf\u00e9 na\u00efve \u2014 accents survive.</p></body></html>""".encode()
    md = await markitdown.convert(page, HTML, "")  # no filename: the MIME type gives the hint
    assert re.search(r"^# Field Notes$", md, re.MULTILINE), md
    assert re.search(r"^## Birds seen$", md, re.MULTILINE), md
    assert re.search(r"^[*-] Kingfisher$", md, re.MULTILINE), md
    assert re.search(r"^\|\s*Heron\s*\|\s*1\s*\|$", md, re.MULTILINE), md
    assert_found(md, sentence)
    assert_found(md, "Café naïve — accents survive.")


async def test_pdf_text_layer(markitdown: MarkItDownConverter) -> None:
    sentence = "The violet submarine surfaced near Reykjavik at noon."
    md = await markitdown.convert(make_pdf([sentence, "A second, plainer line."]), PDF, "report.pdf")
    assert assert_found(md, sentence) < assert_found(md, "A second, plainer line.")


async def test_no_temporary_file_is_left(markitdown: MarkItDownConverter, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    await markitdown.convert(make_pdf(["Scratch check."]), PDF, "scratch.pdf")
    await markitdown.convert(make_docx("H", ["p"], [["a"]]), DOCX, "scratch.docx")
    assert os.listdir(tmp_path) == []


# ---------------------------------------------------------------- bad input


async def test_random_bytes_as_docx_fail_permanently(markitdown: MarkItDownConverter) -> None:
    with pytest.raises(ConversionFailed) as caught:
        await markitdown.convert(os.urandom(4096), DOCX, "random.docx")
    assert caught.value.permanent is True
    assert caught.value.reason in {"unreadable_file", "conversion_error"}
    assert caught.value.detail


async def test_random_bytes_as_pdf_fail_permanently(markitdown: MarkItDownConverter) -> None:
    with pytest.raises(ConversionFailed) as caught:
        await markitdown.convert(os.urandom(4096), PDF, "random.pdf")
    assert caught.value.permanent is True
    assert caught.value.reason in {"unreadable_file", "conversion_error"}


@pytest.mark.parametrize("data", [b"", b"<html><body>  \n </body></html>"])
async def test_markitdown_empty_document(markitdown: MarkItDownConverter, data: bytes) -> None:
    with pytest.raises(ConversionFailed) as caught:
        await markitdown.convert(data, HTML, "empty.html")
    assert (caught.value.reason, caught.value.permanent) == ("empty_document", True)


async def test_timeout_is_transient(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("markitdown")
    slow = MarkItDownConverter(timeout_s=0.2)

    def stuck(data: bytes, mime: str, filename: str) -> str:
        time.sleep(1.0)
        return "late"

    monkeypatch.setattr(slow, "_convert_sync", stuck)
    started = time.monotonic()
    with pytest.raises(ConversionFailed) as caught:
        await slow.convert(b"<p>x</p>", HTML, "x.html")
    assert time.monotonic() - started < 0.9
    assert (caught.value.reason, caught.value.permanent) == ("conversion_timeout", False)
    await asyncio.sleep(1.0)  # let the abandoned worker finish before the next test


# -------------------------------------------------------------- passthrough


async def test_passthrough_normalises_bom_and_line_endings() -> None:
    data = b"\xef\xbb\xbf# Title\r\n\r\nBody line\r\nnext\n"
    md = await PassthroughConverter().convert(data, "text/markdown", "a.md")
    assert md == "# Title\n\nBody line\nnext\n"
    assert md.index("Body line") == len("# Title\n\n")


async def test_passthrough_invalid_utf8() -> None:
    with pytest.raises(ConversionFailed) as caught:
        await PassthroughConverter().convert(b"# ok\n\xff\xfe broken \xc3\x28", "text/markdown", "bad.md")
    assert (caught.value.reason, caught.value.permanent) == ("invalid_utf8", True)
    assert "byte 5" in caught.value.detail


@pytest.mark.parametrize("data", [b"", b"   \r\n\t\n", b"\xef\xbb\xbf"])
async def test_passthrough_empty_document(data: bytes) -> None:
    with pytest.raises(ConversionFailed) as caught:
        await PassthroughConverter().convert(data, "text/plain", "empty.txt")
    assert (caught.value.reason, caught.value.permanent) == ("empty_document", True)


def test_unknown_reason_is_refused() -> None:
    with pytest.raises(ValueError):
        ConversionFailed("mystery")  # type: ignore[arg-type]


# ------------------------------------------------------------------ routing


def test_build_converters_from_default_routes() -> None:
    pytest.importorskip("markitdown")
    converters = build_converters(DEFAULT_ROUTES)
    assert set(converters) == set(DEFAULT_ROUTES)
    for mime, name in DEFAULT_ROUTES.items():
        assert isinstance(converters[mime], Converter)
        assert converters[mime].name == name
        assert converters[mime].version
    assert converters["text/html"] is converters[PDF]  # one instance per converter name


def test_build_converters_rejects_unknown_names() -> None:
    with pytest.raises(ValueError, match="tesseract"):
        build_converters({"image/png": "tesseract"})
