"""A case that failed because the gate's own code raised (:class:`~harness.formats.gate_error.GateError`: its example
generator, its source reader): not a red of the subject, but an error of the gate, said in one line, kept apart from
the verdicts, and ending the session with :data:`~harness.formats.generator_error.GATE_ERROR_STATUS`.

The case's report stays a failure, carries the line in its ``user_properties`` (which xdist hands to the
controller), and is never judged: neither a red section naming the subject nor an advisory's record. A generator's
failure keeps pytest's report (hypothesis' minimal example replays it); any other is its one line and the command
that replays it, never a traceback of the gate's internals.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from harness.formats.gate_error import GateError
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


def gate_error(call: pytest.CallInfo[None]) -> GateError | None:
    """The gate's own error a case raised (in its call or a fixture), found among grouped exceptions too; ``None``
    for any other."""
    error = call.excinfo.value if call.excinfo is not None else None
    return next((e for e in _raised(error) if isinstance(e, GateError)), None)


def mark(report: pytest.TestReport, error: GateError, repro: str) -> None:
    """Tell ``report`` apart as the gate's error: its line in ``user_properties``, and the line with ``repro`` in
    its report (beside a generator's minimal example, or in place of a traceback)."""
    line = str(error)
    report.user_properties.append((PROPERTY, line))
    said = f"{line}\n\nreplay: {repro}"
    if not isinstance(error, GeneratorError):
        report.longrepr = f"{SECTION_TITLE}: {said}"
    elif hasattr(report.longrepr, "addsection"):
        report.longrepr.addsection(SECTION_TITLE, said)


def line_of(report: pytest.TestReport) -> str | None:
    """The gate-error line a report carries, else ``None``."""
    return next((value for key, value in report.user_properties if key == PROPERTY), None)
