"""Why importing a framework's module failed, in one line: the module exists, but running it (or a module it
imports) raised. The line names the chain of module-level statements the import went through, the framework's
files first and the one that raised last, so a user reads which dependency broke the import instead of "no module"
for a module that is there."""

from __future__ import annotations

import traceback
from pathlib import Path

FIRST_LINE = 200
"""How much of the error's own message the line keeps."""


def import_chain(error: BaseException) -> list[str]:
    """``file:line`` of each module-level statement the failed import ran through, outermost first, and of the
    statement that raised where that is inside a function (with the function's name)."""
    frames = [f for f in traceback.extract_tb(error.__traceback__) if not f.filename.startswith("<")]
    chain = [f"{_short(f.filename)}:{f.lineno}" for f in frames if f.name == "<module>"]
    if frames and frames[-1].name != "<module>":
        chain.append(f"{_short(frames[-1].filename)}:{frames[-1].lineno} (in {frames[-1].name})")
    return chain


def import_failure(module: str, error: BaseException) -> str:
    """``importing 'x' raised E: message, through a.py:3 -> b.py:10``: one line."""
    message = str(error).strip().splitlines()[0][:FIRST_LINE] if str(error).strip() else "no message"
    chain = import_chain(error)
    through = f", through {' -> '.join(chain)}" if chain else ""
    return f"importing {module!r} raised {type(error).__name__}: {message}{through}"


def _short(filename: str) -> str:
    """A file as its distribution's installed path (below ``site-packages``), else as given."""
    parts = Path(filename).parts
    if "site-packages" in parts:
        return str(Path(*parts[parts.index("site-packages") + 1 :]))
    return filename
