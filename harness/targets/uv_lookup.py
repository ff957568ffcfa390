"""Where the uv that ``nox[uv]`` installed is, also when the gate's venv is not activated (its command called by
path, as ``pipx`` and CI scripts do): the ``uv`` package's own lookup, then beside the running interpreter, and
``PATH`` only last."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path


def find_uv(path: str | None = None) -> str | None:
    """The uv executable to run, or None where none is installed; ``path`` is the ``PATH`` searched last."""
    try:
        from uv import find_uv_bin
    except ImportError:
        pass
    else:
        try:
            return find_uv_bin()
        except FileNotFoundError:
            pass
    beside = Path(sys.executable).parent / ("uv.exe" if sys.platform == "win32" else "uv")
    if beside.is_file():
        return str(beside)
    return shutil.which("uv", path=path)
