"""An error of the gate's own source reader: the reader is the gate's code, so a form it trips on is the gate's
failure, never a verdict on the framework. It is said in one line naming the file and line being read and the form
there, and ``scan`` ends with :data:`~harness.formats.generator_error.GATE_ERROR_STATUS`, as a failing example
generator does."""

from __future__ import annotations

import ast
import contextlib
from collections.abc import Iterator
from pathlib import Path

from harness.formats.gate_error import GateError

FORM_CHARACTERS = 80
"""How much of the statement being read the line quotes."""


class ReaderError(GateError):
    """The reader raised while reading ``path``; the message is the one line printed."""

    def __init__(self, path: Path, error: BaseException) -> None:
        self.path = path
        line, form = _being_read(error)
        at = f"{path}:{line}" if line else str(path)
        quoted = f" (reading `{form}`)" if form else ""
        super().__init__(
            f"the gate's own source reader failed at {at}{quoted}: {type(error).__name__}: {error}; "
            "this is not a verdict on the framework"
        )


@contextlib.contextmanager
def reading(path: Path) -> Iterator[None]:
    """Turn any error the reader raises while reading ``path`` into a :class:`ReaderError` naming it."""
    try:
        yield
    except ReaderError:
        raise
    except Exception as err:
        raise ReaderError(path, err) from err


def _being_read(error: BaseException) -> tuple[int | None, str]:
    """The line and text of the innermost statement or expression the reader's frames held when ``error`` was
    raised: what the reader was looking at."""
    nodes = []
    trace = error.__traceback__
    while trace is not None:
        nodes += [v for v in trace.tb_frame.f_locals.values() if isinstance(v, ast.stmt | ast.expr)]
        trace = trace.tb_next
    if not nodes:
        return None, ""
    node = nodes[-1]
    text = ast.unparse(node).splitlines()[0] if hasattr(ast, "unparse") else ""
    return getattr(node, "lineno", None), text[:FORM_CHARACTERS]
