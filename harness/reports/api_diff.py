"""What changed in the subject's declared Megatron symbols between two targets.

``nox -s api-diff -- megatron-0.13 megatron-0.16`` runs :mod:`harness.contracts.api_fingerprint` with each target's own
interpreter (the two concurrently; each answers from its cache when that install was fingerprinted before) and diffs
the results: symbols added or removed, parameters added, removed or renamed, defaults, kinds and positions changed,
an alternative group that now resolves to another member (a renamed flag), dataclass fields added or removed, and
normalised function bodies that changed. For a function it also diffs what the body does: module-level functions it
calls (added, removed) and model-config attributes it reads (new, no longer read). A replaced function whose body
changed carries the unified diff of its source between the two targets, folded under its review item.

Two kinds of change head the report under "Review your copy": a changed body (or changed calls or config reads) of a
function the subject *replaces*, since the subject's copy may have fallen behind upstream; and a function that now
calls a same-module *coalesced reduction* (one flat buffer, all-reduced) after its call of a replaced function, since
that reduction runs outside the subject's replacement and whatever the replacement does to bound memory or
communication does not reach it. The report is written as ``reports/api-diff/<a>__<b>.md`` and ``.json``.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from harness import REPO_ROOT
from harness.contracts.api_fingerprint.checks import resolved_member
from harness.formats.markdown import table_row
from harness.source.copies import body_diff
from harness.source.symbol_table import Declared

_ROOT = REPO_ROOT
_FINGERPRINT_TIMEOUT_S = 600
_BODY_CHANGED = "body changed"
CALLS_ADDED = "calls added"
CALLS_REMOVED = "calls removed"
READS_ADDED = "reads new config attributes"
READS_REMOVED = "no longer reads config attributes"
NEW_REDUCTION = "new coalesced reduction after the patched call"
_BODY_CHANGES = (_BODY_CHANGED, CALLS_ADDED, CALLS_REMOVED, READS_ADDED, READS_REMOVED)
_PHRASES = {
    CALLS_ADDED: "now calls",
    CALLS_REMOVED: "no longer calls",
    READS_ADDED: "reads new config attributes:",
    READS_REMOVED: "no longer reads config attributes:",
}


class ApiDiffError(RuntimeError):
    """A target could not be fingerprinted; the message names it and carries its error output."""


def _fingerprint_targets(pythons: dict[str, Path], subject: str, cache_dir: Path) -> dict[str, dict[str, Any]]:
    """Each target's fingerprint of the subject's declared symbols, made by that target's interpreter."""
    if Path(subject).exists():
        subject = str(Path(subject).resolve())
    environment = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(_ROOT), os.environ.get("PYTHONPATH")])),
    }
    with tempfile.TemporaryDirectory(prefix="api-diff-") as scratch:
        running = {}
        for session, python in pythons.items():
            out = Path(scratch) / f"{session}.json"
            command = [str(python), "-m", "harness.contracts.api_fingerprint", "--session", session]
            command += ["--subject", subject, "--cache-dir", str(cache_dir), "--out", str(out)]
            process = subprocess.Popen(
                command, cwd=_ROOT, env=environment, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            )
            running[session] = (process, out)
        outputs = {}
        for session, (process, _) in running.items():
            try:
                outputs[session] = process.communicate(timeout=_FINGERPRINT_TIMEOUT_S)[0]
            except subprocess.TimeoutExpired:
                process.kill()
                outputs[session] = process.communicate()[0] + f"\n(killed after {_FINGERPRINT_TIMEOUT_S} s)"
        results = {}
        for session, (process, out) in running.items():
            if process.returncode != 0:
                raise ApiDiffError(
                    f"target {session}: fingerprinting failed (exit {process.returncode}) with "
                    f"{pythons[session]}:\n{outputs[session][-4000:]}"
                )
            results[session] = json.loads(out.read_text())
    return results


def diff(declaration: list[Declared], before: dict[str, Any], after: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per change of a declared symbol: symbol, usage, change, detail, and whether to review a copy."""
    replaced = {
        member: entry.replacement for entry in declaration if entry.usage == "replaces" for member in entry.members
    }
    rows: list[dict[str, Any]] = []
    for entry in declaration:
        for member in entry.members:
            for change, detail in _symbol_changes(before[member], after[member], replaced):
                review = change == NEW_REDUCTION or (entry.usage == "replaces" and change in _BODY_CHANGES)
                rows.append(
                    {"symbol": member, "usage": entry.usage, "change": change, "detail": detail, "review": review}
                )
        if len(entry.members) > 1:
            rows += _alternative_rows(entry, before, after)
    return rows


def _alternative_rows(entry: Declared, before: dict[str, Any], after: dict[str, Any]) -> list[dict[str, Any]]:
    old, new = resolved_member(entry, before), resolved_member(entry, after)
    if old == new:
        return []
    if new is None:
        change, detail = "no alternative left", f"was `{_name(old)}`" if old else ""
    elif old is None:
        change, detail = "alternative appeared", f"`{_name(new)}`"
    else:
        change = "renamed" if not after[old]["exists"] else "alternative switched"
        gone = "is gone" if not after[old]["exists"] else "still exists; the subject now uses the new one"
        detail = f"`{_name(old)}` → `{_name(new)}` (`{_name(old)}` {gone})"
    return [{"symbol": entry.key, "usage": entry.usage, "change": change, "detail": detail, "review": False}]


def _name(symbol: str) -> str:
    return symbol.rsplit(":", 1)[-1].rsplit(".", 1)[-1]


def _symbol_changes(
    before: dict[str, Any], after: dict[str, Any], replaced: dict[str, str | None] | None = None
) -> list[tuple[str, str]]:
    """``(change, detail)`` pairs between two fingerprints of one symbol.

    ``replaced`` maps each symbol the subject replaces to its replacement, so that calls of them can be found in
    the bodies of other functions (see :func:`_call_changes`).
    """
    if not before["exists"] or not after["exists"]:
        if before["exists"] == after["exists"]:
            return []
        return [("added", after["kind"])] if after["exists"] else [("removed", after["missing"])]
    changes: list[tuple[str, str]] = []
    if before["kind"] != after["kind"]:
        return [("kind changed", f"{before['kind']} → {after['kind']}")]
    if before.get("module") != after.get("module"):
        changes.append(("defining module changed", f"`{before.get('module')}` → `{after.get('module')}`"))
    if before.get("parameters") is not None and after.get("parameters") is not None:
        changes += parameter_changes(before["parameters"], after["parameters"])
    if "fields" in before:
        changes += _field_changes(before["fields"], after["fields"])
    for key in ("type", "default", "value"):
        if before.get(key) != after.get(key):
            changes.append((f"{key} changed", f"`{before.get(key)}` → `{after.get(key)}`"))
    if before.get("body_hash") and after.get("body_hash") and before["body_hash"] != after["body_hash"]:
        changes.append((_BODY_CHANGED, f"normalised body {before['body_hash']} → {after['body_hash']}"))
    if before.get("calls") is not None and after.get("calls") is not None:
        changes += _call_changes(before["calls"], after["calls"], replaced or {}, after)
    if before.get("config_reads") is not None and after.get("config_reads") is not None:
        changes += _config_read_changes(before["config_reads"], after["config_reads"])
    return changes


def _call_changes(
    before: list[dict[str, Any]],
    after: list[dict[str, Any]],
    replaced: dict[str, str | None],
    function: dict[str, Any],
) -> list[tuple[str, str]]:
    """Callees added and removed (by name as written), and each coalesced reduction that is new after the call of a
    replaced function.

    An added callee is annotated with where it runs relative to the patched call and whether it is a coalesced
    reduction. A coalesced reduction counts as new after the patched call when ``before`` did not call it there
    (not at all, or only before the patched call); ``function`` is ``after``'s fingerprint of the caller, for its
    name and source location.
    """
    old = [call["name"] for call in before]
    new = [call["name"] for call in after]
    patched = _patched_index(after, replaced)
    changes: list[tuple[str, str]] = []
    first: dict[str, int] = {}
    for index, call in enumerate(after):
        if call["name"] not in old:
            first.setdefault(call["name"], index)
    added = []
    for name, index in first.items():
        notes = [_where(index, patched, after)] if patched is not None else []
        notes += ["coalesced reduction"] if after[index].get("coalesced_reduction") else []
        added.append(f"`{name}`" + (f" ({'; '.join(notes)})" if notes else ""))
    if added:
        changes.append((CALLS_ADDED, ", ".join(added)))
    removed = list(dict.fromkeys(name for name in old if name not in new))
    if removed:
        changes.append((CALLS_REMOVED, ", ".join(f"`{name}`" for name in removed)))
    if patched is None:
        return changes
    earlier = _patched_index(before, replaced)
    already = {call["name"] for call in before[earlier + 1 :]} if earlier is not None else set()
    reported: set[str] = set()
    for index, call in enumerate(after[patched + 1 :], patched + 1):
        if call.get("coalesced_reduction") and call["name"] not in already | reported:
            reported.add(call["name"])
            changes.append((NEW_REDUCTION, _reduction_finding(function, after, index, patched, replaced)))
    return changes


def _patched_index(calls: list[dict[str, Any]], replaced: dict[str, str | None]) -> int | None:
    """Where the first call of a replaced function is, in ``calls``."""
    return next((index for index, call in enumerate(calls) if call.get("target") in replaced), None)


def _where(index: int, patched: int, calls: list[dict[str, Any]]) -> str:
    """Where call ``index`` runs relative to the patched call; "right after" means no recorded call in between
    (calls on locals such as ``config.timers(...)`` are not recorded)."""
    name = calls[patched]["name"]
    if index == patched:
        return "the patched call"
    if index < patched:
        return f"before the patched `{name}`"
    return f"{'right after' if index == patched + 1 else 'after'} the patched `{name}`"


def _reduction_finding(
    function: dict[str, Any], calls: list[dict[str, Any]], index: int, patched: int, replaced: dict[str, str | None]
) -> str:
    """The plain sentence for a new coalesced reduction after the patched call, with where upstream makes it."""
    owner = str(function.get("qualname") or "the function").rsplit(".", 1)[-1]
    callee, upstream = calls[index]["name"], calls[patched]["name"]
    replacement = replaced.get(calls[patched]["target"])
    yours = f" (the subject's `{replacement}`)" if replacement else ""
    sentence = (
        f"`{owner}` now calls `{callee}` {_where(index, patched, calls)}: a new coalesced reduction (one flat buffer, "
        f"all-reduced) that a chunked replacement of `{upstream}`{yours} does not cover."
    )
    source = function.get("source")
    if source and ":" in source:
        path, line = source.rsplit(":", 1)
        if line.isdigit():
            sentence += f" Upstream calls it at `{path}:{int(line) + calls[index]['line']}`."
    return sentence


def _config_read_changes(before: list[str], after: list[str]) -> list[tuple[str, str]]:
    """Config attributes read now and not before, and read before and not now."""
    changes: list[tuple[str, str]] = []
    came = [name for name in after if name not in before]
    gone = [name for name in before if name not in after]
    if came:
        changes.append((READS_ADDED, ", ".join(f"`{name}`" for name in came)))
    if gone:
        changes.append((READS_REMOVED, ", ".join(f"`{name}`" for name in gone)))
    return changes


def parameter_changes(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """Parameters added, removed or renamed, and kinds, defaults, annotations and positions changed.

    A removed and an added parameter at the same position with the same kind, default and annotation are one
    rename; anything else stays a removal plus an addition.
    """
    old_names = [p["name"] for p in before]
    new_names = [p["name"] for p in after]
    removed = [(i, p) for i, p in enumerate(before) if p["name"] not in new_names]
    added = [(i, p) for i, p in enumerate(after) if p["name"] not in old_names]
    changes: list[tuple[str, str]] = []
    for i, old in list(removed):
        same = ("kind", "default", "annotation")
        match = next(((j, new) for j, new in added if j == i and all(new[k] == old[k] for k in same)), None)
        if match is not None:
            removed.remove((i, old))
            added.remove(match)
            changes.append(("parameter renamed", f"`{old['name']}` → `{match[1]['name']}` (position {i + 1})"))
    changes += [("parameter removed", f"{_parameter(p)} (was position {i + 1})") for i, p in removed]
    changes += [("parameter added", f"{_parameter(p)} at position {j + 1}") for j, p in added]
    for old in before:
        if old["name"] not in new_names:
            continue
        new = after[new_names.index(old["name"])]
        name = old["name"]
        if old["kind"] != new["kind"]:
            changes.append(("parameter kind changed", f"`{name}`: {old['kind']} → {new['kind']}"))
        if old["default"] != new["default"]:
            changes.append(("default changed", f"`{name}`: `{old['default']}` → `{new['default']}`"))
        if old["annotation"] != new["annotation"]:
            changes.append(("annotation changed", f"`{name}`: `{old['annotation']}` → `{new['annotation']}`"))
        positional = ("POSITIONAL_ONLY", "POSITIONAL_OR_KEYWORD")
        if new["kind"] in positional and old_names.index(name) != new_names.index(name):
            position = f"{old_names.index(name) + 1} → {new_names.index(name) + 1}"
            changes.append(("parameter moved", f"`{name}`: position {position}"))
    return changes


def _field_changes(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """Dataclass fields added and removed (one row each, listing them), and defaults and types changed."""
    old = {f["name"]: f for f in before}
    new = {f["name"]: f for f in after}
    changes: list[tuple[str, str]] = []
    gone = [_field(f) for name, f in old.items() if name not in new]
    came = [_field(f) for name, f in new.items() if name not in old]
    if gone:
        changes.append(("fields removed", ", ".join(gone)))
    if came:
        changes.append(("fields added", ", ".join(came)))
    for name in (n for n in old if n in new):
        for key in ("default", "type"):
            if old[name][key] != new[name][key]:
                changes.append((f"field {key} changed", f"`{name}`: `{old[name][key]}` → `{new[name][key]}`"))
    return changes


def _parameter(p: dict[str, Any]) -> str:
    """A parameter as the report shows it: `tp_group=None`, `*args`, or `force=False` (keyword-only)."""
    name = {"VAR_POSITIONAL": "*", "VAR_KEYWORD": "**"}.get(p["kind"], "") + p["name"]
    text = f"`{name}`" if p["default"] is None else f"`{name}={p['default']}`"
    return f"{text} (keyword-only)" if p["kind"] == "KEYWORD_ONLY" else text


def _field(f: dict[str, Any]) -> str:
    return f"`{f['name']}`" if f["default"] is None else f"`{f['name']}={f['default']}`"


def build_report(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """The report of two fingerprints written by :func:`_fingerprint_targets` (the first one's declaration).

    ``review`` holds one entry per new coalesced reduction after a patched call (first) and per replaced function
    whose body changed; the calls and config reads that changed with that body are named in its ``finding`` rather
    than listed as entries of their own, so each replaced function is one item to review.
    """
    declaration = [Declared(**{**e, "members": tuple(e["members"])}) for e in before["declaration"]]
    rows = diff(declaration, before["symbols"], after["symbols"])
    changed = {row["symbol"] for row in rows}
    review = [
        {
            **row,
            "replacement": entry.replacement,
            "source": after["symbols"][row["symbol"]].get("source"),
        }
        for row in rows
        if row["review"] and row["change"] in (NEW_REDUCTION, _BODY_CHANGED)
        for entry in declaration
        if row["symbol"] in entry.members
    ]
    review.sort(key=lambda row: row["change"] != NEW_REDUCTION)
    for row in review:
        if row["change"] == _BODY_CHANGED:
            row["diff"] = _body_diff(row["symbol"], before, after)
        what = [
            f"{_PHRASES[r['change']]} {r['detail']}"
            for r in rows
            if r["symbol"] == row["symbol"] and r["change"] in _PHRASES
        ]
        row["finding"] = _finding(row, before["session"], after["session"], what)
    return {
        "targets": [_target(before), _target(after)],
        "subject": before["subject"],
        "changes": rows,
        "review": review,
        "unchanged": [s for e in declaration for s in e.members if s not in changed],
    }


def _body_diff(symbol: str, before: dict[str, Any], after: dict[str, Any]) -> str:
    """The unified diff of a function's source between two targets ("" where either has none)."""
    old, new = before["symbols"][symbol], after["symbols"][symbol]
    if not old.get("body") or not new.get("body"):
        return ""
    labels = (f"{print_['session']}: {print_['symbols'][symbol].get('source')}" for print_ in (before, after))
    return body_diff(old["body"], new["body"], *labels)


def _finding(row: dict[str, Any], first: str, second: str, what: list[str]) -> str:
    """What to review, as one sentence that reads on its own in the Markdown and in the JSON; ``what`` says how the
    body changed (calls and config reads)."""
    if row["change"] == NEW_REDUCTION:
        return row["detail"]
    how = f" ({'; '.join(what)})" if what else ""
    return (
        f"upstream's body changed between {first} and {second}{how}, and the subject replaces it with its own "
        f"`{row['replacement']}`. Compare your copy with upstream's `{row['source']}`."
    )


def _target(fingerprint: dict[str, Any]) -> dict[str, Any]:
    keys = ("session", "megatron_core", "origin", "key", "cached")
    return {key: fingerprint[key] for key in keys}


def render_markdown(report: dict[str, Any]) -> str:
    """The report as Markdown: targets, the review list, then one table row per change."""
    a, b = report["targets"]
    lines = [
        f"# Megatron API diff: {a['session']} → {b['session']}",
        "",
        f"Subject `{report['subject']}`; only the symbols it declares in `MEGATRON_SYMBOLS` are compared.",
        "",
        f"| | {a['session']} | {b['session']} |",
        "|---|---|---|",
        f"| megatron-core | {a['megatron_core']} | {b['megatron_core']} |",
        f"| origin | {a['origin'] or 'package index'} | {b['origin'] or 'package index'} |",
        f"| install key | {a['key']} | {b['key']} |",
        "",
    ]
    if report["review"]:
        lines += ["## Review your copy", ""]
        for row in report["review"]:
            lines.append(f"- **`{row['symbol']}`**: {row['finding']}")
            if row.get("diff"):
                lines += ["", "  <details><summary>upstream's body, diff</summary>", "", "  ```diff"]
                lines += [f"  {line}" for line in row["diff"].splitlines()]
                lines += ["  ```", "", "  </details>"]
        lines.append("")
    lines += ["## Changes", ""]
    if report["changes"]:
        lines += ["| symbol | usage | change | detail |", "|---|---|---|---|"]
        for row in report["changes"]:
            change = f"**{row['change']}: review your copy**" if row["review"] else row["change"]
            cells = [f"`{row['symbol']}`", row["usage"], change, row["detail"]]
            lines.append(table_row(cells))
    else:
        lines.append("No declared symbol changed.")
    if report["unchanged"]:
        lines += ["", "Unchanged: " + ", ".join(f"`{s}`" for s in report["unchanged"])]
    return "\n".join(lines) + "\n"


def write_report(report: dict[str, Any], directory: Path) -> tuple[Path, Path]:
    """``<a>__<b>.md`` and ``<a>__<b>.json`` under ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    stem = "__".join(target["session"] for target in report["targets"])
    markdown, data = directory / f"{stem}.md", directory / f"{stem}.json"
    markdown.write_text(render_markdown(report))
    data.write_text(json.dumps(report, indent=2) + "\n")
    return markdown, data


def compare(pythons: dict[str, Path], subject: str, cache_dir: Path) -> dict[str, Any]:
    """Fingerprint the two targets named in ``pythons`` (in order) and build their report."""
    fingerprints = _fingerprint_targets(pythons, subject, cache_dir)
    first, second = (fingerprints[session] for session in pythons)
    return build_report(first, second)
