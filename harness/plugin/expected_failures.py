"""Per-target expected failures: test-id prefixes applied as strict xfail.

Strictness is the point: when a fixed incompatibility starts passing, the session goes red until its line is removed,
and a line that matches no collected test is reported as stale, so the file cannot silently rot.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pytest


def read(path: Path) -> list[str]:
    """Test-id prefixes listed in ``path``; blank lines and ``#`` comments (whole-line or trailing) are ignored."""
    prefixes = []
    for line in path.read_text().splitlines():
        entry = line.split("#", 1)[0].strip()
        if entry:
            prefixes.append(entry)
    return prefixes


def stale(prefixes: Iterable[str], ids: Iterable[str]) -> list[str]:
    """Prefixes that match none of ``ids``."""
    ids = list(ids)
    return [p for p in prefixes if not any(i.startswith(p) for i in ids)]


def apply(prefixes: list[str], items: list[pytest.Item], source: Path) -> list[str]:
    """Mark every item whose id starts with a prefix as strict xfail; return the stale prefixes."""
    for item in items:
        for prefix in prefixes:
            if item.nodeid.startswith(prefix):
                item.add_marker(pytest.mark.xfail(reason=f"expected failure listed in {source}", strict=True))
                break
    return stale(prefixes, (item.nodeid for item in items))
