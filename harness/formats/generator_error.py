"""An error of the gate's own example generator: what it is called, what it says, and the status it ends a run with.

A strategy that raises while drawing an example (an interval that came out empty, a sample from nothing) has found a
bug of the gate, not of the subject: no subject code ran for that example. Its line says so, names the strategy, and
the run ends with :data:`GATE_ERROR_STATUS`, a status no verdict uses (0 green, 1 red, 4 a declaration that cannot be
read), so a CI job can tell "the gate is broken" from "the adapter is". The strategies raise it
(:mod:`harness.contracts.gate_strategies`), the pytest plugin and the noxfile read it; it lives here so that each
of them can.
"""

from __future__ import annotations

from harness.formats.gate_error import GateError

GATE_ERROR_STATUS = 70
"""The exit status of a run in which the gate's own example generator failed (``EX_SOFTWARE`` of ``sysexits.h``)."""
PREFIX = "the gate's own example generator failed"
NOT_A_VERDICT = "this is not a verdict on the subject"


class GeneratorError(GateError):
    """A strategy of the gate raised while drawing an example; ``strategy`` is its ``module:qualname``."""

    def __init__(self, strategy: str, error: BaseException) -> None:
        self.strategy = strategy
        super().__init__(generator_line(strategy, f"{type(error).__name__}: {error}"))


def generator_line(strategy: str, error_text: str) -> str:
    """The one line that says the gate's generator failed, in which strategy, with what error."""
    first = error_text.splitlines()[0] if error_text else "no message"
    return f"{PREFIX}: {strategy} raised {first}; {NOT_A_VERDICT}"
