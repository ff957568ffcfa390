"""The skip reason of a case whose family needs a role the subject's declaration leaves out.

Written by the plugin as the case's skip message, read back by the report, which shows such a case as "not
declared" rather than skipped: a family the subject never declared is never green.
"""

from __future__ import annotations

from pathlib import Path

NOT_DECLARED = "not declared"


def not_declared_reason(family: str, role: str, declaration: Path) -> str:
    """``not declared: <family> needs [<role>] in <declaration file>``."""
    return f"{NOT_DECLARED}: {family} needs [{role}] in {declaration}"


def is_not_declared(message: str) -> bool:
    """Whether a skip message is one :func:`not_declared_reason` wrote."""
    return message.startswith(f"{NOT_DECLARED}:")
