"""The scale estimate in a target session: where the subject's declaration has ``[scale]``, its models are measured
on this target once the cases are done, and each verdict is recorded as a finding (printed with the others, kept in
``summary.json``, read by the report). It is a finding, never a red.

The measurement builds models under Megatron's parallel state on torch's ``fake`` process group, which must not
touch the session's own state (its rank pools, the warm run's fork server): in a session it runs in a process forked
from the fork server the ranks start from, which has imported torch and Megatron and nothing of the session's
(a fresh interpreter of the target venv, ``python -m harness.contracts.scale``, spent about 4 s of a 5 s measurement
importing them again). Measured from another interpreter (``nox -s scale``, the tests) it runs in that target venv's
interpreter. A run narrowed to some cases (a repro line) skips it.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from harness import REPO_ROOT
from harness.formats.scale_findings import finding
from harness.plugin.records import append_record
from harness.ranks.forked_call import ForkedCallError, call_in_fork
from harness.subjects.declaration import Declaration

SCALE_TIMEOUT_S = 600
FAMILY = "scale"
"""The family name scale findings are recorded under."""


def scale_request(declaration: Declaration, subject: str) -> dict[str, Any]:
    """What the measuring interpreter is asked: the declared models, the subject, the declared budget."""
    return {"models": list(declaration.scale["models"]), "subject": subject, "budget": declaration.scale.get("budget")}


def measure_in_target(request: dict[str, Any], python: str | None = None) -> list[dict[str, Any]]:
    """Each model's result, measured by ``python -m harness.contracts.scale`` in the interpreter ``python``, or where
    it is None, in a process forked from this session's fork server (:mod:`harness.ranks.forked_call`); a measurement
    that gave nothing gives one result naming why, for every model."""
    output, why = _measured_in_fork(request) if python is None else _measured_by(request, python)
    results = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
    if results:
        return results
    return [
        {"model": m.get("name") or m.get("preset") or "model", "megatron": "?", "layout": "", "error": why}
        for m in request["models"]
    ]


def _measured_by(request: dict[str, Any], python: str) -> tuple[str, str]:
    """What ``python -m harness.contracts.scale`` printed, and why it printed nothing (its last line of stderr)."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "request.json"
        path.write_text(json.dumps(request))
        try:
            done = subprocess.run(
                [python, "-m", "harness.contracts.scale", str(path)],
                cwd=REPO_ROOT,
                capture_output=True,
                text=True,
                timeout=SCALE_TIMEOUT_S,
            )
        except subprocess.TimeoutExpired:
            return "", f"the measurement took over {SCALE_TIMEOUT_S} s"
    return done.stdout, (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]


def _measured_in_fork(request: dict[str, Any]) -> tuple[str, str]:
    """:func:`harness.contracts.scale.measured_output` of the request, from a process forked from the fork server,
    and why it may have given nothing (the error that stopped it, the timeout, the child's early exit)."""
    try:
        output = call_in_fork("harness.contracts.scale:measured_output", request, timeout_s=SCALE_TIMEOUT_S)
    except ForkedCallError as err:
        return "", str(err)
    return output, "the measurement printed nothing"


def record_scale_findings(report_dir: Path, declaration: Declaration | None, subject: str, narrowed: bool) -> None:
    """Measure the declared models and record one finding each; nothing where ``[scale]`` is not declared or the
    run was narrowed to some cases."""
    if declaration is None or not declaration.scale or narrowed:
        return
    for result in measure_in_target(scale_request(declaration, subject)):
        append_record(report_dir, "findings", {"family": FAMILY, "text": finding(result)})
