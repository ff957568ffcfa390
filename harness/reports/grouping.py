"""Notes and findings said once, with the targets and subjects they apply to.

Four subjects on four targets repeat most of what a session notes (an upstream fallback, a waiver, a family that did
not run) sixteen times over. Each sentence is kept once, followed by where it was said: a target named alone means
every subject checked there said it; otherwise the subjects that did follow the target in brackets.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping


def grouped(items: Iterable[tuple[str, str, str]], subjects_on: Mapping[str, list[str]]) -> list[tuple[str, str]]:
    """``(where, text)`` for each distinct text of ``items`` (``(target, subject, text)``, the subject empty in a
    report of one), in the order first said; ``subjects_on`` lists every subject each target checked."""
    found: dict[str, dict[str, list[str]]] = {}
    for target, subject, text in items:
        subjects = found.setdefault(text, {}).setdefault(target, [])
        if subject not in subjects:
            subjects.append(subject)
    return [(_where(targets, subjects_on), text) for text, targets in found.items()]


def _where(targets: Mapping[str, list[str]], subjects_on: Mapping[str, list[str]]) -> str:
    parts = []
    for target, subjects in targets.items():
        everyone = set(subjects_on.get(target, [])) <= set(subjects) or subjects == [""]
        parts.append(target if everyone else f"{target} ({', '.join(s for s in subjects if s)})")
    return ", ".join(parts)
