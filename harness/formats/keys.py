"""Key validation of the YAML and TOML mappings the gate reads (matrix, mutant catalogue), so every such file
rejects an unknown or missing key with the same words: the key, and what is allowed."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def key_problem(
    mapping: Mapping[str, Any], required: Iterable[str], optional: Iterable[str] = ()
) -> tuple[str, str] | None:
    """The first unknown key (in file order) or, failing that, the first missing required key, with what is wrong;
    ``None`` when the keys are right."""
    required, optional = tuple(required), tuple(optional)
    allowed = (*required, *optional)
    for key in mapping:
        if key not in allowed:
            return str(key), f"unknown key (allowed: {', '.join(allowed)})"
    for key in required:
        if key not in mapping:
            return key, "missing required key"
    return None
