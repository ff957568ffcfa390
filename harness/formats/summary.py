"""``reports/<session>/summary.json``: what a target session records about itself besides its verdicts.

Written by the pytest plugin at the end of a session, read by the compatibility report and by the noxfile (a
candidate's findings). One dataclass for both sides, so a field cannot be renamed on one side only; a summary written
by an older gate, without the newer fields, reads with their defaults.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FILE_NAME = "summary.json"

COUNTED = ("passed", "failed", "error", "skipped", "xfailed", "xpassed")
"""The outcomes a summary counts, as pytest's terminal reporter names them."""

Record = dict[str, str]
"""One waiver (``kind``, ``name``, ``allowed_by``, ``detail``), advisory (``family``, ``case``, ``text``,
``repro``) or finding (``family``, ``text``)."""


class SummaryError(ValueError):
    """A summary file that is not JSON, or not an object."""


@dataclass
class SessionSummary:
    """One target session's record. ``subject`` is the spec as given (module, ``.py`` path or declaration file);
    ``matrix`` the matrix file when it is not the checkout's own (a candidate's), so a repro line can name it."""

    target: str = ""
    subject: str | None = None
    subject_kind: str = "module"
    subject_label: str | None = None
    declaration_lines: int | None = None
    matrix: str | None = None
    selection: list[str] | None = None
    pins: dict[str, str | None] = field(default_factory=dict)
    installed: dict[str, str] = field(default_factory=dict)
    megatron_origin: str | None = None
    counts: dict[str, int] = field(default_factory=dict)
    stale_expected_failures: list[str] = field(default_factory=list)
    waivers: list[Record] = field(default_factory=list)
    advisories: list[Record] = field(default_factory=list)
    findings: list[Record] = field(default_factory=list)
    exit_status: int | None = 0
    wall_time_s: float = 0.0
    family_seconds: dict[str, float] = field(default_factory=dict)
    blocked: list[str] = field(default_factory=list)
    """Why families could not check anything (a Megatron that cannot be imported, a subject that cannot be loaded,
    a required family without its role): each also a red of every family it blocked."""
    not_run: dict[str, str] = field(default_factory=dict)
    """Every family that checked nothing in this session, and why (blocked, skipped, not selected)."""
    gate_errors: list[Record] = field(default_factory=list)
    """Each case the gate's own example generator broke (``case``, ``text``): an error of the gate, not a verdict on
    the subject; the session then ended with the gate's own status."""

    def write(self, directory: Path) -> Path:
        """Write ``directory/summary.json``; returns its path."""
        path = directory / FILE_NAME
        path.write_text(json.dumps(dataclasses.asdict(self), indent=2) + "\n")
        return path

    @classmethod
    def from_mapping(cls, raw: dict[str, Any]) -> SessionSummary:
        """A summary from its JSON object; keys this gate does not know (a newer gate's) are left out."""
        known = {f.name for f in dataclasses.fields(cls)}
        values = {key: value for key, value in raw.items() if key in known and value is not None}
        return cls(**values)


def read_summary(path: Path) -> SessionSummary:
    """The summary at ``path`` (a file, or the session directory holding one); :class:`SummaryError` when it cannot
    be read as one, ``OSError`` when it is not there."""
    if path.is_dir():
        path = path / FILE_NAME
    try:
        raw = json.loads(path.read_text())
    except ValueError as err:
        raise SummaryError(str(err)) from None
    if not isinstance(raw, dict):
        raise SummaryError(f"expected a JSON object, found {type(raw).__name__}")
    return SessionSummary.from_mapping(raw)
