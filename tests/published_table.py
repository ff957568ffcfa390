"""``nox -s published -- [NAME ...] [--targets VERSION ...] [--blind DIR]``: the replaced Megatron symbols of
frameworks as published on the package index, judged from source on every release of the matrix, against the verdicts
written for them beforehand by readers of the framework's and Megatron's source alone (``tests/published/expected/``).
The blind corpus (``tests/published/blind/``) is judged the same way on the releases its readers judged (each
framework's declared release and 0.19.2): SkyRL from its wheel, the frameworks published only as repositories from
their checkouts, folders named as the corpus names them under ``--blind DIR``.

The framework's wheel and each release's Megatron wheel are unpacked once into the cache
(:mod:`harness.targets.release_source`); nothing is installed or imported, so all seven releases take seconds. A
cell is the expected verdict and the gate's; a red or advisory also compares the Megatron line the table names
first with the gate's findings. Writes ``docs/published.md``; exits 1 where a cell differs.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from harness import REPO_ROOT
from harness.source.call_sites import MegatronSource
from harness.source.framework_failures import FAILURE
from harness.source.from_source import versions_of
from harness.source.object_classes import UNPLACED
from harness.source.source_verdicts import framework_verdicts
from harness.targets.matrix import load_matrix
from harness.targets.release_source import distribution_source, release_source

PUBLISHED = {"mcore-bridge": ("1.6.5", "mcore_bridge"), "ms-swift": ("4.6.0", "swift"), "verl": ("0.9.1", "verl")}
"""Distribution -> (version, the top-level package its Megatron code lives in)."""

BLIND_ON_INDEX = {"skyrl": ("0.3.0", "skyrl")}
"""Frameworks of the blind corpus whose release is on the package index: read from its wheel, in every run."""
ON_INDEX = {**PUBLISHED, **BLIND_ON_INDEX}

EXPECTED = REPO_ROOT / "tests" / "published" / "expected"
BLIND = REPO_ROOT / "tests" / "published" / "blind"
NOT_JUDGED = "not done"
"""A blind table's verdict on a release its readers did not judge: no cell there."""
PAGE = REPO_ROOT / "docs" / "published.md"
DIFFERENCES = REPO_ROOT / "tests" / "published" / "differences.md"
"""Why the cells that differ differ, written after reading both sides: the page's last section."""
COMMAND = "nox -s published"


@dataclass(frozen=True)
class Cell:
    """One symbol on one release: what the table expects, what the gate says, and whether they agree."""

    expected: str
    found: str
    line_expected: str | None = None
    line_found: bool = True

    @property
    def agrees(self) -> bool:
        return self.expected == self.found and self.line_found


def releases(only: list[str] | None = None) -> list[tuple[str, str]]:
    """(megatron-core version, torch version) of every matrix target, oldest first."""
    found = []
    for target in load_matrix(REPO_ROOT / "matrix.yaml").targets:
        megatron = target.megatron.location.partition("==")[2]
        torch = str(target.torch).lstrip("=<>!~")
        if megatron and (not only or megatron in only):
            found.append((megatron, torch))
    return found


Found = dict[str, tuple[str, str, tuple[str, ...]]]
"""Symbol -> (the gate's verdict, its findings as one text, where the framework patches it)."""


def source_root(name: str, blind: Path | None = None) -> Path:
    """Where ``name``'s source is read: its unpacked wheel, or its checkout under ``blind``."""
    if name in ON_INDEX:
        version, package = ON_INDEX[name]
        return distribution_source(name, version, package)
    if blind is None or not (blind / name).is_dir():
        raise SystemExit(
            f"{COMMAND}: {name} is published only as a repository: name its checkout's folder with --blind"
        )
    return blind / name


def label_of(name: str) -> str:
    """The release or commit a framework's table was written for."""
    if name in ON_INDEX:
        return ON_INDEX[name][0]
    return json.loads((BLIND / name / "expected.json").read_text())["framework"]


def blind_names() -> list[str]:
    return sorted(path.name for path in BLIND.iterdir() if (path / "expected.json").is_file())


def gate_verdicts(root: Path, megatron: str, torch: str) -> Found:
    """The gate's verdicts for the framework under ``root`` on ``megatron``, read from source."""
    source = MegatronSource(release_source(megatron, venvs=REPO_ROOT / ".nox").root)
    verdicts = framework_verdicts(root, source, versions_of(source, megatron, torch))
    return {v.symbol: (v.verdict, " ".join(v.findings), tuple(v.patched_at)) for v in verdicts}


def named_as_table(found: Found, table: dict) -> Found:
    """The gate's verdicts under the table's names: a method bound on built objects is ``symbol@file:line`` at the
    gate; a table that names no other patch of that symbol calls it by the symbol alone. A class that moved to
    another module on this release keeps the one row the table gives its ``Class.member``. A patch the gate cannot
    place on this release (``?:...``: no module or class of it here) takes the row of the table's patch made at the
    same framework line, where the gate has no other row for it. A table that keys a symbol by each site patching it
    (``symbol@file:line``) gets the gate's verdict of the symbol at each of them the gate read."""
    named = {}
    for symbol, verdict in found.items():
        if symbol.startswith(f"{UNPLACED}:"):
            same = [s for s, entry in table.items() if entry.get("patched_at") in verdict[2] and s not in found]
            named[same[0] if len(same) == 1 else symbol] = verdict
            continue
        plain = symbol.partition("@")[0]
        alone = plain not in found and sum(s.partition("@")[0] == plain for s in found) == 1
        if symbol not in table and plain not in table and alone:
            qualname = plain.partition(":")[2]
            plains = {other.partition("@")[0] for other in found}
            moved = [s for s in table if s.partition(":")[2] == qualname and s not in plains]
            plain = moved[0] if len(moved) == 1 else plain
        sites = [s for s in table if s.partition("@")[0] == plain and s.partition("@")[2] in verdict[2]]
        if symbol not in table and plain not in table and sites:
            named |= dict.fromkeys(sites, verdict)  # a table keying each patch site: the symbol's verdict at each
            continue
        named[plain if symbol not in table and plain in table and alone else symbol] = verdict
    return named


def table_of(name: str) -> dict:
    """The expected verdicts written for ``name``: symbol -> its entry."""
    path = EXPECTED / f"{name}.json" if name in PUBLISHED else BLIND / name / "expected.json"
    symbols = json.loads(path.read_text())["symbols"]
    return {key.replace(" @", "@"): entry for key, entry in symbols.items()}  # a blind table's `Cls.m @file:line`


def judged(table: dict, megatron: str) -> bool:
    """Whether the table's readers judged release ``megatron`` (a blind table judges two)."""
    return any(
        entry.get("targets", {}).get(megatron, {}).get("verdict", NOT_JUDGED) != NOT_JUDGED for entry in table.values()
    )


def stops(found: Found) -> Found:
    """The gate's rows for the framework's own code stopping before its patches (``!:<file>:<line>``): not replaced
    symbols, so no table has them; the page lists them beside the table."""
    return {key: verdict for key, verdict in found.items() if key.startswith(f"{FAILURE}:")}


def cells(table: dict, megatron: str, found: Found, scoped: bool = False) -> dict[str, Cell]:
    """Symbol -> cell on release ``megatron``, over the table's symbols and the gate's replaced symbols. A ``scoped``
    table (the blind corpus's) judges part of a framework's patches: megatron-core's, not every record of a long
    registry; there a symbol it did not judge is no cell, and one it does not list is a cell only where the gate
    reads it red on megatron-core (a red the table does not have)."""
    stopped = stops(found)
    found = named_as_table({key: verdict for key, verdict in found.items() if key not in stopped}, table)
    row = {}
    for symbol in sorted(set(table) | set(found)):
        wanted = table.get(symbol, {}).get("targets", {}).get(megatron, {})
        expected = wanted.get("verdict", "-")
        verdict, text, _ = found.get(symbol, ("-", "", ()))
        unlisted_not_red = symbol not in table and not (verdict == "red" and symbol.startswith("megatron.core."))
        if scoped and (expected == NOT_JUDGED or unlisted_not_red):
            continue
        lines = wanted.get("lines") or []
        first = lines[0] if expected in ("red", "advisory") and lines else None
        row[symbol] = Cell(expected, verdict, first, first is None or first in text)
    return row


Stops = dict[str, dict[str, Found]]
"""Framework -> release -> the gate's rows for the framework's own code stopping there."""


def compare(name: str, root: Path, targets: list[tuple[str, str]], stopped: Stops) -> dict[str, dict[str, Cell]]:
    """Symbol -> release -> cell, over the table's symbols and the gate's, on the releases the table judges; the
    gate's rows for the framework's own code stopping go to ``stopped``."""
    table = table_of(name)
    rows: dict[str, dict[str, Cell]] = {}
    for megatron, torch in targets:
        if not judged(table, megatron):
            continue
        found = gate_verdicts(root, megatron, torch)
        stopped.setdefault(name, {})[megatron] = stops(found)
        for symbol, cell in cells(table, megatron, found, scoped=name not in PUBLISHED).items():
            rows.setdefault(symbol, {})[megatron] = cell
    return rows


def stop_lines(stopped: dict[str, Found]) -> list[str]:
    """One framework's rows for its own code stopping, by release: what the symbols' cells do not show."""
    if not any(stopped.values()):
        return []
    out = ["Where the framework's own code stops before its patches (rows of the gate, not replaced symbols):", ""]
    for megatron, found in stopped.items():
        out += [f"- {megatron}: {verdict} `{key}`: {text}" for key, (verdict, text, _) in sorted(found.items())]
    return [*out, ""]


def page(results: dict[str, dict[str, dict[str, Cell]]], targets: list[tuple[str, str]], stopped: Stops) -> str:
    heads = [megatron for megatron, _ in targets]
    out = [
        "# Frameworks as published: replaced Megatron symbols",
        "",
        f"Made by `{COMMAND}`: each framework's wheel read from source, never imported, against every matrix release's",
        "Megatron source, next to the verdicts written beforehand by readers who saw only the two sources",
        "([`tests/published/expected/`](../tests/published/expected/), their brief in `PROMPT.md`). A cell is",
        "`expected → gate` where they differ; `-` is a symbol one side does not list. A red or advisory also needs",
        "the Megatron line the table names first among the gate's findings (else `line`).",
        "",
        "The blind corpus ([`tests/published/blind/`](../tests/published/blind/)) follows, on the releases its",
        "readers judged (each framework's declared release and 0.19.2), on the symbols they judged, and where the gate",
        "reads red a megatron-core symbol they do not list: SkyRL from its wheel in every run; FlagScale, MindSpeed,",
        "Pai-Megatron-Patch and Primus, published only as repositories, where `-- --blind DIR` names their checkouts.",
        "",
    ]
    for name, rows in results.items():
        out += framework_table(name, rows, heads) + stop_lines(stopped.get(name, {}))
    return "\n".join(out) + "\n" + DIFFERENCES.read_text()


def framework_table(name: str, rows: dict[str, dict[str, Cell]], heads: list[str]) -> list[str]:
    """One framework's section: how many cells agree, and the table of symbols by release."""
    every = [cell for row in rows.values() for cell in row.values()]
    agree = sum(cell.agrees for cell in every)
    undecided = sum(cell.found == "undecided" for cell in every)
    decided = [cell for cell in every if cell.found != "-"]
    out = [
        f"## {name} {label_of(name)}",
        "",
        f"{agree} of {len(every)} cells agree; the gate leaves {undecided} of {len(decided)} it reads undecided.",
        "",
        "| symbol | " + " | ".join(heads) + " |",
        "|---|" + "---|" * len(heads),
    ]
    for symbol, row in rows.items():
        shown = []
        for head in heads:
            cell = row.get(head)
            if cell is None:
                shown.append("")
            elif cell.agrees:
                shown.append(f"✅ {cell.found}")
            else:
                line = "" if cell.line_found else f" (line {cell.line_expected})"
                shown.append(f"❌ {cell.expected} → {cell.found}{line}")
        out.append(f"| `{symbol}` | " + " | ".join(shown) + " |")
    return [*out, ""]


def differing(results: dict[str, dict[str, dict[str, Cell]]]) -> list[str]:
    """One line per cell that differs."""
    return [
        f"{name} {symbol} on {release}: expected {cell.expected}, gate {cell.found}"
        + ("" if cell.line_found else f" (without {cell.line_expected})")
        for name, rows in results.items()
        for symbol, row in rows.items()
        for release, cell in row.items()
        if not cell.agrees
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND)
    parser.add_argument("names", nargs="*", help=f"distributions (default: {', '.join(PUBLISHED)})")
    parser.add_argument("--targets", nargs="*", help="megatron-core versions (default: every matrix target)")
    parser.add_argument(
        "--blind",
        type=Path,
        help="a folder holding checkouts of the blind corpus's repositories, named as it names them",
    )
    options = parser.parse_args(argv)
    targets = releases(options.targets)
    known = [*PUBLISHED, *blind_names()]
    unknown = [name for name in options.names if name not in known]
    if unknown:
        parser.error(f"no expected table for {', '.join(unknown)}: known are {', '.join(known)}")
    checked = [*BLIND_ON_INDEX] + ([n for n in blind_names() if n not in BLIND_ON_INDEX] if options.blind else [])
    names = options.names or [*PUBLISHED, *checked]
    stopped: Stops = {}
    results = {name: compare(name, source_root(name, options.blind), targets, stopped) for name in names}
    PAGE.write_text(page(results, targets, stopped))
    differ = differing(results)
    print(f"wrote {PAGE.relative_to(REPO_ROOT)}")
    for line in differ:
        print(line)
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
