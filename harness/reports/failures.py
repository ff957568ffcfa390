"""What a red reads as in the report: one ``<failure>`` or ``<error>`` of a session's JUnit file, its kind, its first
lines, hypothesis' example and blob, and the line that replays it."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from xml.etree.ElementTree import Element

from harness.formats import red_section
from harness.formats.generator_error import PREFIX as GENERATOR_ERROR

KINDS = {
    "failure": "failed",
    "error": "error (setup, teardown or collection)",
    "xpass": "passed though listed as an expected failure (strict)",
    "gate-error": "the gate's own example generator failed: an error of the gate, not a verdict on the subject",
}
"""What each kind of red is called in its failure entry, in both renderings."""

_MESSAGE_LINES = 4
_LINE_CHARS = 300
_EXAMPLE_LINES = 40
_FIXTURE_ARGUMENTS = ("subject", "target")
"""Fixtures every case takes: the same in all examples of a session (the target's repr alone runs to 25 lines)."""

_BLOB = re.compile(r"@reproduce_failure\([^)]*\)")
_EXAMPLE = re.compile(r"^(?:E\s+)?((?:Falsifying example|Failing test case): .*)$")
_TRUNCATED = re.compile(r"^\[\+\d+ more lines; full report in element text\]$")


@dataclass(frozen=True)
class Failure:
    """One red (failure, error or strict XPASS) on one target, with what is needed to replay it."""

    target: str
    nodeid: str
    kind: str
    message: tuple[str, ...]
    repro: str
    anchor: str
    contract: str | None = None
    symbol: str | None = None
    blob: str | None = None
    example: tuple[str, ...] = ()


def _message_lines(message: str) -> tuple[str, ...]:
    """The first lines of the assertion message, up to hypothesis' example (shown on its own)."""
    lines = []
    for line in message.splitlines():
        if _EXAMPLE.match(line):
            break
        if line.strip() and not _TRUNCATED.match(line.strip()):
            lines.append(line.rstrip())
    return tuple(line if len(line) <= _LINE_CHARS else line[: _LINE_CHARS - 1] + "…" for line in lines[:_MESSAGE_LINES])


def _example(text: str) -> tuple[str, ...]:
    """Hypothesis' falsifying example as it printed it (pytest's ``E`` prefix removed), until its call closes."""
    lines = text.splitlines()
    for start, line in enumerate(lines):
        header = _EXAMPLE.match(line)
        if not header:
            continue
        prefix = line[: header.start(1)]
        block = [header.group(1)]
        depth = block[0].count("(") - block[0].count(")")
        for follower in lines[start + 1 :]:
            if depth <= 0:
                break
            follower = follower.removeprefix(prefix).rstrip()
            block.append(follower)
            depth += follower.count("(") - follower.count(")")
        return _without_fixtures(block)[:_EXAMPLE_LINES]
    return ()


def _without_fixtures(block: list[str]) -> tuple[str, ...]:
    """The example's call without the arguments that are the same for every example of a session."""
    kept, skipping = [block[0]], False
    for line in block[1:]:
        argument = re.match(r"^ {4}(\w+)=", line)
        if argument:
            skipping = argument.group(1) in _FIXTURE_ARGUMENTS
        elif not line.startswith(" "):
            skipping = False
        if not skipping:
            kept.append(line)
    return tuple(kept)


def parse_failure(
    element: Element, session: str, nodeid: str, environment: Mapping[str, str], anchor: str, target_session: str
) -> Failure:
    """A ``<failure>`` or ``<error>`` element read into a :class:`Failure`; a red the gate plugin could not annotate
    (strict XPASS, collection) gets the repro line the plugin would have printed, on the target's session."""
    text = element.text or ""
    message = element.get("message") or text
    kind = "xpass" if message.startswith("[XPASS(strict)]") else element.tag
    if GENERATOR_ERROR in message:
        kind = "gate-error"
    section, repro = red_section.parse(text)
    if repro is None:
        repro = red_section.repro_line(target_session, nodeid, environment)
    blob = _BLOB.search(text)
    return Failure(
        target=session,
        nodeid=nodeid,
        kind=kind,
        message=_message_lines(message),
        repro=repro,
        anchor=anchor,
        contract=section.contract if section else None,
        symbol=section.symbol if section else None,
        blob=blob.group(0) if blob else None,
        example=_example(text),
    )
