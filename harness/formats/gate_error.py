"""The gate's own failure, as opposed to a verdict: the gate's code (an example generator, the source reader) raised
where it should have judged. Such an error is said in one line, kept apart from the verdicts, and ends the run with
:data:`~harness.formats.generator_error.GATE_ERROR_STATUS`. Each kind subclasses :class:`GateError` where it is
raised; the pytest plugin finds any of them without knowing each."""

from __future__ import annotations


class GateError(Exception):
    """An error of the gate's own code; its message is the one line printed."""
