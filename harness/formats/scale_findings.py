"""The scale estimate's verdicts and its finding sentence, shared by the measurement (in a target venv), the case
that records it, the ``scale`` session and the report (which reads the sentence back into a row)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from harness.formats.byte_sizes import exact

NO_PATCH = "no coalesced reduction: the patch is not needed"
CHANGES_NOTHING = "your budget is above everything upstream coalesces here: the patch changes nothing for this model"
HOLDS = "upstream coalesces {upstream} in one buffer ({name}); your budget holds {budget}"
"""The three verdicts: the third filled in with exact byte counts."""
PATTERN = re.compile(r"megatron-core \S+, at scale \((?P<model>[^,()]+), (?P<layout>[^()]*)\): (?P<rest>.*)")
"""A scale finding: the version, the model and its layout, then the verdict and the figures."""


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def verdict_text(reductions: list[Mapping[str, Any]], budget: int) -> str:
    """The verdict for the reductions reached (each with ``name`` and ``upstream_bytes``) at ``budget`` bytes."""
    if not reductions:
        return NO_PATCH
    largest = max(reductions, key=lambda r: r["upstream_bytes"])
    if budget >= largest["upstream_bytes"]:
        return CHANGES_NOTHING
    return HOLDS.format(upstream=exact(largest["upstream_bytes"]), name=largest["name"], budget=exact(budget))


def finding(result: Mapping[str, Any]) -> str:
    """One model's result on one target as the sentence a session records (``summary.json``'s findings) and prints:
    the verdict, every reduction reached with its bytes and collectives, the budget and where it came from, the
    reductions not reached and the fields the local layer specs ignore."""
    head = f"megatron-core {result['megatron']}, at scale ({result['model']}, {result.get('layout', '')})"
    if "error" in result:
        return f"{head}: not measured, the model could not be built here: {result['error']}"
    parts = [result["verdict"]]
    for reduction in result["reductions"]:
        parts.append(
            f"{reduction['name']} flattens {exact(reduction['upstream_bytes'])} in "
            f"{_plural(reduction['upstream_collectives'], 'collective')}, the subject's largest message "
            f"{exact(reduction['subject_bytes'])} in {_plural(reduction['subject_collectives'], 'collective')}"
        )
    parts.append(f"budget {exact(result['budget'])} ({result['budget_source']})")
    if result["not_reached"]:
        parts.append(f"not reached: {', '.join(result['not_reached'])}")
    if result["ignored"]:
        parts.append(f"fields the local layer specs ignore: {', '.join(result['ignored'])}")
    return f"{head}: " + "; ".join(parts)
