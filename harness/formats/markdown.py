"""Markdown that survives what it quotes: table cells with pipes and newlines, code with backticks. Every Markdown
the gate writes (compatibility matrix, api-diff, sensitivity, bench) escapes through here."""

from __future__ import annotations

import html
import re


def _table_cell(text: str) -> str:
    """``text`` as one cell of a pipe table: pipes escaped, line breaks folded into spaces."""
    return " ".join(text.splitlines()).replace("|", "\\|")


def table_row(cells: list[str]) -> str:
    """One pipe-table row of already formatted cells, each escaped."""
    return "| " + " | ".join(_table_cell(cell) for cell in cells) + " |"


def _longest_backtick_run(text: str) -> int:
    return max((len(run) for run in re.findall(r"`+", text)), default=0)


def code_span(text: str) -> str:
    """An inline code span that survives backticks in ``text``."""
    fence = "`" * (_longest_backtick_run(text) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def code_block(text: str, language: str = "text") -> str:
    """A fenced block that survives fences inside ``text``."""
    fence = "`" * max(3, _longest_backtick_run(text) + 1)
    return f"{fence}{language}\n{text}\n{fence}"


def breakable(text: str) -> str:
    """``text`` escaped for HTML, with a break opportunity after each ``_``, ``.`` and ``/``: a case or function
    name, a dotted package or a path then wraps inside its column instead of widening the page."""
    escaped = html.escape(text)
    for mark in "_./":
        escaped = escaped.replace(mark, f"{mark}<wbr>")
    return escaped


def breakable_code(text: str) -> str:
    """``text`` as inline code in Markdown that may wrap as :func:`breakable` text does: raw ``<code>`` (a code span
    cannot hold ``<wbr>``), its Markdown punctuation escaped so that nothing inside turns into emphasis or a link."""
    escaped = re.sub(r"([\\`*_\[\]~])", r"\\\1", html.escape(text))
    for mark in "_./":
        escaped = escaped.replace(mark, f"{mark}<wbr>")
    return f"<code>{escaped}</code>"
