"""The mutant catalogue (``mutants.yaml`` beside this module, schema in its header): parsing and validation, every
error naming the mutant and the key.

A *megatron* mutant is a set of exact text edits to a copy of a target's installed ``megatron`` package: a release
moving or changing what the subject leans on. A *subject* mutant is a seeded broken subject, shipped under
``seeded/`` beside the catalogue so that a copy of the gate without ``tests/`` can run it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from harness.formats.keys import key_problem
from harness.plugin.families import MUTABLE, family

CATALOGUE = Path(__file__).resolve().parent / "mutants.yaml"
_FAMILY_NAMES = tuple(f.name for f in MUTABLE)
_KINDS = ("megatron", "subject")
_REQUIRED_KEYS = ("id", "kind", "targets", "why")
_OPTIONAL_KEYS = ("family", "equivalent", "edits", "subject", "finding")
_EDIT_KEYS = ("file", "find", "replace")
_EDIT_OPTIONAL_KEYS = ("count",)


class CatalogueError(ValueError):
    """The mutant catalogue cannot be used; the message names the file, the mutant and the key."""


@dataclass(frozen=True)
class Edit:
    """Replace ``find`` by ``replace`` in ``file`` (relative to the ``megatron`` package root); ``find`` must occur
    exactly ``count`` times, so a release that moved the text fails loudly instead of yielding an unmutated copy."""

    file: str
    find: str
    replace: str
    count: int = 1


@dataclass(frozen=True)
class Mutant:
    """One catalogue entry."""

    id: str
    kind: str
    targets: tuple[str, ...]
    why: str
    family: str | None = None
    equivalent: bool = False
    edits: tuple[Edit, ...] = ()
    subject: str | None = None
    finding: str | None = None
    """Text a finding of its family's run must contain: a mutant that changes no value the subject computes (a new
    unchunked reduction upstream makes beside the patched one) is caught by what the gate says of the target, not by
    a red."""

    def selection(self) -> list[str]:
        """The case files of the first run: the family that must catch it, or every family but smoke."""
        if self.equivalent:
            return [f.case_file for f in MUTABLE]
        return [family(str(self.family)).case_file]


def _fail(where: str, message: str) -> CatalogueError:
    return CatalogueError(f"{where}: {message}")


def _text(where: str, entry: dict[str, Any], key: str) -> str:
    value = entry.get(key)
    if not isinstance(value, str) or not value:
        raise _fail(where, f"'{key}' must be a non-empty string, got {value!r}")
    return value


def _edit(where: str, raw: object) -> Edit:
    if not isinstance(raw, dict):
        raise _fail(where, f"an edit must be a mapping, got {raw!r}")
    problem = key_problem(raw, _EDIT_KEYS, _EDIT_OPTIONAL_KEYS)
    if problem:
        raise _fail(where, f"edit key '{problem[0]}': {problem[1]}")
    file = _text(where, raw, "file")
    if Path(file).is_absolute() or ".." in Path(file).parts:
        raise _fail(where, f"edit file {file!r} must be relative to the megatron package root")
    if not isinstance(raw["replace"], str):
        raise _fail(where, f"'replace' must be a string, got {raw['replace']!r}")
    count = raw.get("count", 1)
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise _fail(where, f"edit 'count' must be a positive integer, got {count!r}")
    return Edit(file, _text(where, raw, "find"), raw["replace"], count)


def _mutant(where: str, entry: dict[str, Any], known: tuple[str, ...], base: Path) -> Mutant:
    problem = key_problem(entry, _REQUIRED_KEYS, _OPTIONAL_KEYS)
    if problem:
        raise _fail(where, f"key '{problem[0]}': {problem[1]}")
    kind = entry["kind"]
    if kind not in _KINDS:
        raise _fail(where, f"kind {kind!r} is not one of {', '.join(_KINDS)}")
    targets = entry["targets"]
    if not isinstance(targets, list) or not targets:
        raise _fail(where, f"'targets' must be a non-empty list of target sessions, got {targets!r}")
    strange = [t for t in targets if t not in known]
    if strange:
        raise _fail(where, f"target {strange[0]!r} is not in the matrix (known: {', '.join(known)})")
    equivalent = entry.get("equivalent", False)
    if not isinstance(equivalent, bool):
        raise _fail(where, f"'equivalent' must be true or false, got {equivalent!r}")
    family = entry.get("family")
    if equivalent and family is not None:
        raise _fail(where, "an equivalent mutant must stay green everywhere; it names no 'family'")
    if not equivalent and family not in _FAMILY_NAMES:
        raise _fail(where, f"'family' must be one of {', '.join(_FAMILY_NAMES)}, got {family!r}")
    edits: tuple[Edit, ...] = ()
    subject = None
    if kind == "megatron":
        if "subject" in entry:
            raise _fail(where, "a megatron mutant takes 'edits', not 'subject'")
        if not isinstance(entry.get("edits"), list) or not entry["edits"]:
            raise _fail(where, "a megatron mutant needs a non-empty list of 'edits'")
        edits = tuple(_edit(where, raw) for raw in entry["edits"])
    else:
        if "edits" in entry:
            raise _fail(where, "a subject mutant takes 'subject', not 'edits'")
        subject = _text(where, entry, "subject")
        if not (base / subject).exists():
            raise _fail(where, f"subject {subject} does not exist under {base}")
        subject = str((base / subject).resolve())
    why = _text(where, entry, "why")
    finding = _text(where, entry, "finding") if "finding" in entry else None
    if finding is not None and equivalent:
        raise _fail(where, "a mutant caught by a finding is not equivalent: it names its 'family' instead")
    mutant_id = _text(where, entry, "id")
    return Mutant(mutant_id, kind, tuple(targets), why, family, equivalent, edits, subject, finding)


def parse_catalogue(
    document: object, known_targets: Iterable[str], source: str = "catalogue", base: Path = CATALOGUE.parent
) -> list[Mutant]:
    """Validate a loaded catalogue document: every error names the mutant and the key. A subject mutant's path is
    relative to ``base``, the catalogue's directory, so the catalogue works wherever the gate was copied."""
    if not isinstance(document, dict):
        raise CatalogueError(f"{source}: the document must be a mapping with one key, 'mutants', holding a list")
    problem = key_problem(document, ("mutants",))
    if problem:
        raise CatalogueError(f"{source}: key '{problem[0]}': {problem[1]}")
    if not isinstance(document["mutants"], list):
        raise CatalogueError(f"{source}: key 'mutants' must hold a list")
    known = tuple(known_targets)
    mutants: list[Mutant] = []
    for index, entry in enumerate(document["mutants"]):
        if not isinstance(entry, dict):
            raise CatalogueError(f"{source}: entry {index} must be a mapping, got {entry!r}")
        ident = entry.get("id")
        where = f"{source}: mutant {ident!r}" if isinstance(ident, str) and ident else f"{source}: entry {index}"
        mutant = _mutant(where, entry, known, base)
        if any(m.id == mutant.id for m in mutants):
            raise CatalogueError(f"{where}: duplicate id")
        mutants.append(mutant)
    return mutants


def load_catalogue(path: Path, known_targets: Iterable[str]) -> list[Mutant]:
    """Read and validate the catalogue at ``path``."""
    try:
        document = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as err:
        raise CatalogueError(f"{path}: {err}") from None
    return parse_catalogue(document, known_targets, str(path), path.parent)


def select(mutants: list[Mutant], ids: Iterable[str] | None) -> list[Mutant]:
    """The mutants named by ``ids`` (all when ``None``), in catalogue order; an unknown id is an error."""
    if ids is None:
        return mutants
    wanted = set(ids)
    unknown = sorted(wanted - {m.id for m in mutants})
    if unknown:
        raise CatalogueError(f"no mutant named {', '.join(map(repr, unknown))} in the catalogue")
    return [m for m in mutants if m.id in wanted]
