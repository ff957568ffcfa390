"""The uv commands an install runs, with pip's indexes, find-links and constraints handed over (uv reads none of
pip's configuration) and the uv that ``nox[uv]`` installed found also where the gate's venv is not activated."""

from __future__ import annotations

import subprocess
from pathlib import Path

from harness.targets.uv_lookup import find_uv
from harness.targets.venv_install import index_options, pip_settings


def uv() -> str:
    """The uv executable: the one installed beside the gate, else the one on ``PATH``."""
    return find_uv() or "uv"


def index_arguments() -> list[str]:
    """uv's options for where pip looks (this machine's find-links, extra indexes and constraints)."""
    return index_options(pip_settings())


def uv_pip(python: Path, command: str, arguments: list[str]) -> subprocess.CompletedProcess[str]:
    """``uv pip <command>`` on the venv of ``python``."""
    return subprocess.run([uv(), "pip", command, "--python", str(python), *arguments], capture_output=True, text=True)
