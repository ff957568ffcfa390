"""What installing the framework beside the target reported (overrides of its torch or megatron-core pins, what
moved, what was left out, a target outside its declared range), made findings of the session that runs in that venv.

The install happens before the session (in the nox session that builds the venv,
:mod:`harness.install.framework_install`), which records its report in the venv; the session reads it from the venv
it runs in, so ``summary.json`` and the report carry it beside the verdicts it explains.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from harness.install.framework_install import RECORD
from harness.plugin.records import append_record

FAMILY = "install"
"""The family name install findings are recorded under."""


def record_install_findings(report_dir: Path, prefix: Path | None = None) -> list[str]:
    """Record, as findings, what the install of the venv at ``prefix`` (default: the running one) reported."""
    recorded = (Path(sys.prefix) if prefix is None else prefix) / RECORD
    if not recorded.is_file():
        return []
    lines = [str(line) for line in json.loads(recorded.read_text()).get("report", [])]
    for line in lines:
        append_record(report_dir, "findings", {"family": FAMILY, "text": line})
    return lines
