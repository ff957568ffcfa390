"""Records a session keeps besides verdicts: waivers, advisories and findings, gathered for ``summary.json``.

Cases record from whichever process runs them (xdist workers share the report directory), so each process appends
to a file of its own and the session's end reads them all back, once each.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

RECORDS_DIR = "records"


def clear_records(report_dir: Path) -> None:
    """Forget what an earlier session in ``report_dir`` recorded."""
    shutil.rmtree(report_dir / RECORDS_DIR, ignore_errors=True)


def append_record(report_dir: Path, kind: str, entry: dict[str, str]) -> None:
    """Append ``entry`` to this process's file of ``kind`` (``waivers``, ``advisories`` or ``findings``)."""
    path = report_dir / RECORDS_DIR / kind / f"{os.getpid()}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as stream:
        stream.write(json.dumps(entry) + "\n")


def read_records(report_dir: Path, kind: str) -> list[dict[str, str]]:
    """Every record of ``kind`` made in this session, once each, sorted."""
    seen = {
        tuple(sorted(json.loads(line).items()))
        for path in (report_dir / RECORDS_DIR / kind).glob("*.jsonl")
        for line in path.read_text().splitlines()
        if line.strip()
    }
    return [dict(entry) for entry in sorted(seen)]
