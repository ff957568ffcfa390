"""The reference subject's byte budget: where it comes from and the value in force.

It has a module of its own so that the all-reduce (which reads it per call) and the installer (which sets it) both
depend on it and not on each other.
"""

from __future__ import annotations

import os

BUDGET_ENV_VAR = "MEGATRON_CONFORMANCE_ALLREDUCE_CHUNK_BYTES"
DEFAULT_BUDGET_BYTES = 1 << 30

_installed: int | None = None


def budget_from_environment() -> int:
    """The budget named by :data:`BUDGET_ENV_VAR`, or the 1 GiB default; a malformed value raises ``ValueError``."""
    raw = os.environ.get(BUDGET_ENV_VAR)
    if raw is None:
        return DEFAULT_BUDGET_BYTES
    try:
        value = int(raw.strip())
    except ValueError:
        raise ValueError(f"{BUDGET_ENV_VAR}={raw!r} is not an integer number of bytes") from None
    if value <= 0:
        raise ValueError(f"{BUDGET_ENV_VAR}={raw!r} must be a positive number of bytes")
    return value


def set_installed(budget: int | None) -> None:
    """Record the budget ``install`` was given (``None`` once uninstalled)."""
    global _installed
    _installed = budget


def installed() -> int | None:
    """The budget ``install`` recorded, ``None`` when it recorded none."""
    return _installed


def current_budget() -> int:
    """The budget set by ``install``, else the one the environment names at call time."""
    return _installed if _installed is not None else budget_from_environment()
