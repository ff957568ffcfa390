"""The from-source verdicts of a target session: every Megatron symbol the declared framework replaces that the live
checks did not check applied (the framework cannot be imported here, its apply needs Transformer Engine, the patch
sits in code no declaration names, the method is swapped on built instances), each with how it was checked and why.

What the session writes (``replaced_symbols.json``) and records as findings says, per symbol, "applied" (the live
checks) or "from source" with the one line why, and the verdict: ``fits its N call site(s)`` with them, a red or
advisory naming Megatron's line, ``skipped`` naming the framework's own check, ``absent``, or ``undecided``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

from harness.formats.megatron_symbols import parse_declaration
from harness.source.call_sites import MegatronSource
from harness.source.from_source import versions_of
from harness.source.reader_error import reading
from harness.source.source_verdicts import SymbolVerdict, framework_verdicts
from harness.source.verdict_cache import cached_verdicts, verdicts_key


@dataclass
class SessionSource:
    """The replaced symbols of a session: those checked applied, and the verdicts of those read from source."""

    applied: dict[str, tuple[str, list[str]]] = field(default_factory=dict)
    """Symbol -> the verdict of the live checks' rules on the applied replacement, and its findings."""
    verdicts: list[SymbolVerdict] = field(default_factory=list)
    """The symbols read from source."""
    shadow: list[SymbolVerdict] = field(default_factory=list)
    """The symbols checked applied, read from source too: what shows that both paths agree."""

    def of(self, verdict: str) -> list[SymbolVerdict]:
        return [v for v in self.verdicts if v.verdict == verdict]

    def lines(self) -> list[str]:
        """One line per replaced symbol: how it was checked, and what was found."""
        applied = [
            f"applied: {symbol}: {verdict}" + (f" ({findings[0]})" if verdict == "skipped" else "")
            for symbol, (verdict, findings) in self.applied.items()
        ]
        read = [f"{v.how} ({v.why}): {v.line()}" if v.why else f"{v.how}: {v.line()}" for v in self.verdicts]
        return applied + read

    def write(self, path: Path, target: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        read = {v.symbol: v.verdict for v in self.shadow}
        records = [
            {"symbol": s, "how": "applied", "verdict": verdict, "findings": findings, "from_source": read.get(s)}
            for s, (verdict, findings) in self.applied.items()
        ]
        records += [asdict(v) for v in self.verdicts]
        path.write_text(json.dumps({"target": target, "symbols": records}, indent=1))


ROLE_FUNCTIONS = {"allreduce_non_tensor_model_parallel_grads": "patch"}
"""A replacement named by the role that exposes it -> the declaration table whose ``module`` and ``function`` name
the framework's own function."""


def declared_replacements(
    megatron_symbols: Mapping[str, object], tables: Mapping[str, Mapping[str, object]] | None = None
) -> dict[str, str]:
    """Symbol -> ``module:qualname`` of each ``replaces with`` entry: a function of the framework, or a role's
    (``allreduce_non_tensor_model_parallel_grads``: ``[patch] module`` and ``function``)."""
    entries = parse_declaration(dict(megatron_symbols)) if megatron_symbols else []  # checked when it was read
    named = {}
    for role, table in ROLE_FUNCTIONS.items():
        declared = (tables or {}).get(table) or {}
        if declared.get("module") and declared.get("function"):
            named[role] = f"{declared['module']}:{declared['function']}"
    found = {}
    for entry in (e for e in entries if e.usage == "replaces" and e.replacement):
        replacement = named.get(entry.replacement, entry.replacement)
        if ":" in replacement:
            found.update(dict.fromkeys(entry.members, replacement))
    return found


def session_verdicts(
    root: Path,
    megatron_symbols: Mapping[str, object],
    tables: Mapping[str, Mapping[str, object]],
    megatron: str,
    torch: str,
    applied: Mapping[str, tuple[str, list[str]]],
    why: Mapping[str, str],
    because: str,
    source: MegatronSource | None = None,
) -> SessionSource:
    """The verdicts for the framework under ``root`` on the installed Megatron: symbols in ``applied`` were checked
    live (read from source too, to compare); each other one is read from source, ``why[symbol]`` (else
    ``because``) saying why."""
    source = source or MegatronSource.installed()
    declared = declared_replacements(megatron_symbols, tables)
    key = verdicts_key(root, source.root, (megatron, torch), declared)

    def read() -> list[SymbolVerdict]:
        with reading(root):
            return framework_verdicts(root, source, versions_of(source, megatron, torch), declared)

    verdicts = cached_verdicts(key, read)
    for verdict in verdicts:
        verdict.why = why.get(verdict.symbol, because)
    unapplied = [v for v in verdicts if v.symbol not in applied]
    shadow = [v for v in verdicts if v.symbol in applied]
    return SessionSource(_as_the_framework_applies(applied, shadow), unapplied, shadow)


def _as_the_framework_applies(
    applied: Mapping[str, tuple[str, list[str]]], shadow: list[SymbolVerdict]
) -> dict[str, tuple[str, list[str]]]:
    """The live verdicts, except where the framework's own checks around every call of the function that patches
    leave the patch out on this target (verl 0.9.1 calls ``apply_mtp_inference_patch`` only on NPUs): the declared
    apply made a patch the framework does not make here, so it is skipped, naming the check, with what the live
    checks found beside it. A check inside the function is not taken so: the live apply went through it."""
    found = dict(applied)
    for verdict in shadow:
        if verdict.verdict == "skipped" and verdict.by_callers:
            live, findings = applied[verdict.symbol]
            said = f"; the declared apply makes it, and checked applied it is {live}"
            found[verdict.symbol] = ("skipped", [f"{verdict.findings[0]}{said}", *findings])
    return found
