"""The scale estimate's results read back and shown: per model and target, the bytes each coalesced reduction of
``finalize_model_grads`` flattens into one buffer, and what the subject's chunking sends at its budget.

:mod:`harness.contracts.scale` measures in a target venv and prints one JSON object per model; this module needs
neither torch nor Megatron, so the noxfile's ``scale`` session and the report can render those objects as they are.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from harness.formats.byte_sizes import exact, size
from harness.formats.markdown import code_span, table_row
from harness.formats.scale_findings import cell_text, finding
from harness.reports.grouping import grouped


def short_verdict(result: Mapping[str, Any]) -> str:
    """A verdict as a table cell says it."""
    return cell_text(finding(result))


def _cell(result: Mapping[str, Any] | None, name: str) -> str:
    if result is None or "error" in result:
        return "—"
    found = next((r for r in result["reductions"] if r["name"] == name), None)
    if found is None:
        return "not reached" if name in result["not_reached"] else "—"
    upstream = f"{exact(found['upstream_bytes'])} in {found['upstream_collectives']}"
    if not found["subject_collectives"]:
        return upstream
    return (
        f"{upstream}; subject: buffer {size(found.get('subject_buffer', 0))}, {found['subject_collectives']} messages"
    )


def _note(result: Mapping[str, Any]) -> str:
    if "error" in result:
        return f"not measured: {result['error']}"
    return f"not reached: {', '.join(result['not_reached'])}"


def scale_markdown(results: Mapping[str, Sequence[Mapping[str, Any]]]) -> str:
    """Every target's results (``{target: [result, ...]}``) as one table: per model a verdict row and a row per
    coalesced reduction any target reached, a column per target; the errors and ignored fields below it."""
    targets = list(results)
    models = list(dict.fromkeys(r["model"] for found in results.values() for r in found))
    by = {(t, r["model"]): r for t, found in results.items() for r in found}
    rows = []
    for model in models:
        present = [by.get((t, model)) for t in targets]
        where = next((r.get("layout", "") for r in present if r), "")
        rows.append([f"**{model}** ({where})", *(short_verdict(r) if r else "not run" for r in present)])
        names = dict.fromkeys(x["name"] for r in present if r and "error" not in r for x in r["reductions"])
        rows += [[f"&nbsp;&nbsp;{code_span(name)}", *(_cell(r, name) for r in present)] for name in names]
    lines = [table_row(["model / coalesced reduction", *targets]), "|---" * (len(targets) + 1) + "|"]
    lines += [table_row(row) for row in rows]
    said = [
        (
            t,
            r["model"],
            f"not measured: {r['error']}" if "error" in r else f"not reached: {', '.join(r['not_reached'])}",
        )
        for t, found in results.items()
        for r in found
        if "error" in r or r["not_reached"]
    ]
    notes = [f"- {where}: {text}" for where, text in grouped(said, {t: models for t in targets})]
    return "\n".join([*lines, *(["", *notes] if notes else [])]) + "\n"
