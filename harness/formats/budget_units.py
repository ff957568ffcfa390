"""A budget in the unit a framework speaks (``[budget] unit``): every budget the gate draws is in bytes, and a
framework that takes MiB must be given MiB, or each case runs with a budget 2^20 times too large.

A framework that takes fractions gets the exact fraction; one that takes whole units only (``whole_units = true``)
gets the budget rounded up, and then every bound a case checks is the rounded budget, which the case's words say.
"""

from __future__ import annotations

import math
from typing import Any

UNITS = {"B": 1, "KB": 10**3, "KiB": 2**10, "MB": 10**6, "MiB": 2**20, "GB": 10**9, "GiB": 2**30}
"""What ``[budget] unit`` may say, and how many bytes one of it is."""
CAPTURE_BUDGET_BYTES = 1 << 30
"""The budget given to an apply that requires one when the gate applies it only to see what it binds (1 GiB, the
reference subject's default): a budget changes what the replacement does, never what is bound."""


def in_unit(budget_bytes: int, unit: str, whole_units: bool) -> int | float:
    """``budget_bytes`` as the framework takes it: a whole number of bytes for ``B``, else the fraction of ``unit``, or
    the whole number of units that holds it where the framework takes no fraction."""
    factor = UNITS[unit]
    if factor == 1:
        return budget_bytes
    if whole_units:
        return math.ceil(budget_bytes / factor)
    return budget_bytes / factor


def effective_bytes(budget_bytes: int, unit: str, whole_units: bool) -> int:
    """The budget in bytes the framework really gets: ``budget_bytes``, or more where whole units round it up."""
    return math.ceil(in_unit(budget_bytes, unit, whole_units) * UNITS[unit]) if whole_units else budget_bytes


def effective_budget(subject: Any, budget_bytes: int) -> int:
    """The budget in bytes ``subject`` runs with when given ``budget_bytes``: what every bound of a case is checked
    against (a subject without units runs with exactly what it is given)."""
    effective = getattr(subject, "effective_budget", None)
    return effective(budget_bytes) if callable(effective) else budget_bytes


def budget_words(subject: Any, budget_bytes: int) -> str:
    """``budget 100`` or, where whole units round it up, ``budget 100 (given as 1 MiB: 1048576 bytes, rounded up)``:
    how a case names the budget it checked against."""
    effective = effective_budget(subject, budget_bytes)
    if effective == budget_bytes:
        return f"budget {budget_bytes}"
    unit = getattr(subject, "BUDGET_UNIT", "?")
    return f"budget {budget_bytes} (given as {effective // UNITS.get(unit, 1)} {unit}: {effective} bytes, rounded up)"
