"""``nox -s bisect`` end to end on two real nightly builds of megatron-core, as a user runs it: wdsched
(``tests/frameworks/wdsched/``, written against 0.15.3's ``OptimizerParamScheduler.get_wd``) between the last build
whose ``step`` calls ``self.get_wd()`` and the first that calls ``self.get_wd(param_group)``. The two are adjacent
on main's line, so the answer needs no step: both ends run in venvs of their own through nox (under the test's
folder, not the checkout's ``.nox``), the red is read from
the case that failed, the source diff is read from the builds' files on the index, and a second run reads both
verdicts from the cache. The whole search over the 339 nightlies is measured by hand (docs/bisect.md), not here.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.pytest_helpers import ROOT

WDSCHED = ROOT / "tests" / "frameworks" / "wdsched" / "megatron-conformance.toml"
GREEN, RED = "0.16.0rc0.dev122836", "0.16.0rc0.dev100386"
CASE = "cases/test_api_fingerprint.py::test_megatrons_calls_bind_to_the_replacements"


def _bisect(tmp_path: Path, *arguments: str) -> subprocess.CompletedProcess[str]:
    environment = {
        **os.environ,
        "MEGATRON_CONFORMANCE_SUBJECT": str(WDSCHED),
        "MEGATRON_CONFORMANCE_CACHE": str(tmp_path / "cache"),
        "MEGATRON_CONFORMANCE_REPORTS": str(tmp_path / "reports"),
        "MEGATRON_CONFORMANCE_ENVDIR": str(tmp_path / "venvs"),
    }
    command = [sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py"), "-s", "bisect", "--", *arguments]
    return subprocess.run(command, cwd=ROOT, env=environment, capture_output=True, text=True, timeout=900)


def test_bisect_names_the_nightly_that_started_passing_param_group_and_its_diff(tmp_path: Path) -> None:
    first = _bisect(tmp_path, GREEN, RED)
    output = first.stdout + first.stderr
    assert first.returncode == 0, output[-4000:]
    assert f"bisect good end: megatron-core {GREEN}" in output and ": green, " in output, output[-4000:]
    assert f"bisect bad end: megatron-core {RED}" in output and ": red (1 case), " in output
    assert f"Last green: megatron-core {GREEN} (uploaded 2025-11-13 17:13 UTC)" in output
    assert f"first red: megatron-core {RED} (uploaded 2025-11-13 18:25 UTC)" in output
    assert "the two builds are adjacent on the index" in output
    assert "+    def get_wd(self, param_group: Optional[dict] = None) -> float:" in output
    assert "self.get_wd(param_group)" in output, "the diff of step, the call site, is shown"
    assert "ships no megatron/training: the provider family is left out" in output
    reports = tmp_path / "reports" / "bisect"
    markdown = (reports / "bisect.md").read_text()
    assert CASE in markdown and "<details><summary>" in markdown
    assert (reports / "bisect.html").is_file() and (reports / "steps" / f"{RED}.log").is_file()

    again = _bisect(tmp_path, GREEN, RED)
    assert again.returncode == 0, (again.stdout + again.stderr)[-4000:]
    assert (again.stdout + again.stderr).count(", from the cache") == 2
