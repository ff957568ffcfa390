"""The from-source verdicts of a target session: every Megatron symbol the declared framework replaces that the live
checks did not check applied (the framework cannot be imported here, its apply needs Transformer Engine, the patch
sits in code no declaration names, the method is swapped on built instances), each with how it was checked and why.

What the session writes (``replaced_symbols.json``) and records as findings says, per symbol, "applied" (the live
checks) or "from source" with the one line why, and the verdict: ``fits its N call site(s)`` with them, a red or
advisory naming Megatron's line, ``skipped`` naming the framework's own check, ``absent``, or ``undecided``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

from harness.contracts.api_fingerprint.call_sites import MegatronSource
from harness.contracts.api_fingerprint.framework_guards import Versions
from harness.contracts.api_fingerprint.from_source import defines
from harness.contracts.api_fingerprint.source_verdicts import SymbolVerdict, framework_verdicts
from harness.formats.megatron_symbols import DeclarationError, parse_declaration


@dataclass
class SessionSource:
    """The replaced symbols of a session: those checked applied, and the verdicts of those read from source."""

    applied: dict[str, int] = field(default_factory=dict)
    """Symbol -> the number of Megatron call sites the live checks checked it against."""
    verdicts: list[SymbolVerdict] = field(default_factory=list)

    def of(self, verdict: str) -> list[SymbolVerdict]:
        return [v for v in self.verdicts if v.verdict == verdict]

    def lines(self) -> list[str]:
        """One line per replaced symbol: how it was checked, and what was found."""
        applied = [f"{symbol}: applied: checked live against {n} call site(s)" for symbol, n in self.applied.items()]
        read = [f"{v.how} ({v.why}): {v.line()}" if v.why else f"{v.how}: {v.line()}" for v in self.verdicts]
        return applied + read

    def write(self, path: Path, target: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        records = [{"symbol": s, "how": "applied", "call_sites": n} for s, n in self.applied.items()]
        records += [asdict(v) for v in self.verdicts]
        path.write_text(json.dumps({"target": target, "symbols": records}, indent=1))


def declared_replacements(megatron_symbols: Mapping[str, object]) -> dict[str, str]:
    """Symbol -> ``module:qualname`` of each ``replaces with`` entry that names a function of the framework (a name
    the declared roles expose is the live checks' alone)."""
    try:
        entries = parse_declaration(dict(megatron_symbols)) if megatron_symbols else []
    except DeclarationError:
        return {}
    return {
        member: entry.replacement
        for entry in entries
        if entry.usage == "replaces" and entry.replacement and ":" in entry.replacement
        for member in entry.members
    }


def session_verdicts(
    root: Path,
    megatron_symbols: Mapping[str, object],
    megatron: str,
    torch: str,
    applied: Mapping[str, int],
    why: Mapping[str, str],
    because: str,
    source: MegatronSource | None = None,
) -> SessionSource:
    """The verdicts for the framework under ``root`` on the installed Megatron: symbols in ``applied`` were checked
    live; each other one is read from source, ``why[symbol]`` (else ``because``) saying why."""
    source = source or MegatronSource.installed()
    versions = Versions(megatron, torch, defines(source.root))
    verdicts = framework_verdicts(root, source, versions, declared_replacements(megatron_symbols), applied)
    for verdict in verdicts:
        verdict.why = why.get(verdict.symbol, because)
    return SessionSource(dict(applied), verdicts)


def pooled(verdicts: Iterable[SymbolVerdict]) -> dict[str, int]:
    """How many verdicts of each kind: the share left undecided is what the closing figures count."""
    counts: dict[str, int] = {}
    for verdict in verdicts:
        counts[verdict.verdict] = counts.get(verdict.verdict, 0) + 1
    return counts
