"""A case that failed because the gate's own example generator raised: not a red of the subject, whose code never
ran on that example, but an error of the gate, said in one line, kept apart from the verdicts, and ending the
session with :data:`~harness.formats.generator_error.GATE_ERROR_STATUS`.

The case's report stays a failure (pytest prints it, with hypothesis' minimal example and the line that replays it),
carries the line in its ``user_properties`` (which xdist hands to the controller), and is never judged: neither a
red section naming the subject nor an advisory's record.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from harness.formats.generator_error import GeneratorError

PROPERTY = "gate-error"
"""The ``user_properties`` key that carries the line of a case the gate's generator broke."""
SECTION_TITLE = "the gate's own error"


def _raised(error: BaseException | None) -> Iterator[BaseException]:
    """``error`` and every exception grouped in it (hypothesis groups distinct failures, and flaky ones)."""
    if error is None:
        return
    yield error
    for inner in getattr(error, "exceptions", ()):
        yield from _raised(inner)


def generator_error(call: pytest.CallInfo[None]) -> GeneratorError | None:
    """The generator error a case's call raised, found among grouped exceptions too; ``None`` for any other."""
    error = call.excinfo.value if call.excinfo is not None else None
    return next((e for e in _raised(error) if isinstance(e, GeneratorError)), None)


def mark(report: pytest.TestReport, error: GeneratorError, repro: str) -> None:
    """Tell ``report`` apart as the gate's error: its line in ``user_properties`` and a section ending in ``repro``."""
    line = str(error)
    report.user_properties.append((PROPERTY, line))
    if hasattr(report.longrepr, "addsection"):
        report.longrepr.addsection(SECTION_TITLE, f"{line}\n\nreplay: {repro}")


def line_of(report: pytest.TestReport) -> str | None:
    """The gate-error line a report carries, else ``None``."""
    return next((value for key, value in report.user_properties if key == PROPERTY), None)
