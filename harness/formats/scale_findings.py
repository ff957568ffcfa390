"""The scale estimate's verdicts and its finding sentence, shared by the measurement (in a target venv), the case
that records it, the ``scale`` session and the report (which reads the sentence back into a row)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.formats.byte_sizes import exact

NO_PATCH = "no coalesced reduction: the patch is not needed"
CHANGES_NOTHING = "your budget is above everything upstream coalesces here: the patch changes nothing for this model"
HOLDS = "upstream coalesces {upstream} in one buffer ({name}); your budget holds {budget}{sent}"
"""The three verdicts: the third filled in with exact byte counts."""
PATTERN = re.compile(r"megatron-core \S+, at scale \((?P<model>[^,()]+), (?P<layout>[^()]*)\): (?P<rest>.*)")
"""A scale finding: the version, the model and its layout, then the verdict and the figures."""


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def verdict_text(reductions: list[Mapping[str, Any]], budget: int) -> str:
    """The verdict for the reductions reached (``name``, ``upstream_bytes``, and where the subject was measured its
    ``subject_buffer`` and ``subject_collectives``) at ``budget`` bytes: the patch changes nothing where the subject
    makes a buffer as large as upstream's anyway (or, not measured, where the budget is above it)."""
    if not reductions:
        return NO_PATCH
    largest = max(reductions, key=lambda r: r["upstream_bytes"])
    measured = [r for r in reductions if r.get("subject_collectives")]
    sent = max((r.get("subject_buffer", 0) for r in measured), default=None)
    if (sent if sent is not None else budget) >= largest["upstream_bytes"]:
        return CHANGES_NOTHING
    sent_text = "" if sent is None else f", and the subject's largest buffer is {exact(sent)}"
    return HOLDS.format(
        upstream=exact(largest["upstream_bytes"]), name=largest["name"], budget=exact(budget), sent=sent_text
    )


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
            f"{_plural(reduction['upstream_collectives'], 'collective')}, the subject's largest buffer "
            f"{exact(reduction.get('subject_buffer', 0))} and largest message {exact(reduction['subject_bytes'])} in "
            f"{_plural(reduction['subject_collectives'], 'collective')}"
        )
    parts.append(f"budget {exact(result['budget'])} ({result['budget_source']})")
    if result["not_reached"]:
        parts.append(f"not reached: {', '.join(result['not_reached'])}")
    if result["ignored"]:
        parts.append(f"fields the local layer specs ignore: {', '.join(result['ignored'])}")
    return f"{head}: " + "; ".join(parts)


PRESETS_FILE = Path(__file__).resolve().parents[1] / "contracts" / "scale_presets.yaml"
"""The published architectures a ``[scale]`` model names by ``preset``."""
DEFAULT_MODELS = (
    {"preset": "llama-8b", "tp": 2, "sp": True},
    {"preset": "llama-70b", "tp": 8, "sp": True},
    {"preset": "qwen3-30b-a3b", "tp": 4, "sp": True, "ep": 8},
    {"preset": "qwen3-235b-a22b", "tp": 4, "sp": True, "ep": 16},
    {"preset": "deepseek-v3", "tp": 8, "sp": True, "ep": 32},
)
"""The layouts ``nox -s scale`` measures every preset in: tensor parallel with sequence parallelism (the reduction
in question exists only there), experts spread over the data-parallel ranks."""


MODEL_KEYS = ("name", "preset", "config", "fields", "vocab_size", "max_position_embeddings")
LAYOUT_KEYS = ("tp", "sp", "ep", "pp", "main_grad_dtype")
MAIN_GRAD_DTYPES = ("float32", "bfloat16", "float16")

_HOLDS = re.compile(
    r"upstream coalesces [\d,]+ B(?: \((?P<upstream>[^)]*)\))? in one buffer \(\w+\); your budget holds "
    r"(?P<exact>[\d,]+ B)(?: \((?P<budget>[^)]*)\))?(?:, and the subject's largest buffer is (?P<sent>[\d,]+ B)"
    r"(?: \((?P<sent_size>[^)]*)\))?)?"
)


def cell_text(text: str) -> str:
    """A scale finding's verdict as a table cell says it: ``5 MiB in one buffer; budget 4 MiB``, ``budget above all
    of it: no change``, ``no coalesced reduction: not needed``, or ``not measured``."""
    found = PATTERN.fullmatch(text)
    rest = found["rest"] if found else text
    if rest.startswith("not measured"):
        return "not measured (see the notes)"
    if rest.startswith(NO_PATCH):
        return "no coalesced reduction: not needed"
    if rest.startswith(CHANGES_NOTHING):
        return "budget above all of it: no change"
    holds = _HOLDS.match(rest)
    if holds:
        upstream = holds["upstream"] or rest.split(" ")[2] + " B"
        budget = holds["budget"] or holds["exact"]
        sent = f", the subject's at most {holds['sent_size'] or holds['sent']}" if holds["sent"] else ""
        return f"{upstream} in one buffer{sent} (budget {budget})"
    return rest.split("; ")[0]


def row_label(text: str) -> str | None:
    """The findings row a scale finding belongs to (``at scale: llama-70b (TP 8 + SP)``); ``None`` for another
    finding."""
    found = PATTERN.fullmatch(text)
    return f"at scale: {found['model']} ({found['layout']})" if found else None
