"""An error of the gate's own source reader, in a real target session: the from-source verdicts of a declared
framework are read while its cases run, and a reader that raises there ends the session with the gate's own status
and one line naming the framework file, its line and the statement being read; nothing reads as a red of the
framework, and no traceback of the reader is printed. The same framework with the reader as the gate ships it is
read, and its one patch is judged."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.formats.generator_error import GATE_ERROR_STATUS
from tests.pytest_helpers import run_target_cases

SESSION = "megatron-0.15"
CASES = ["cases/test_api_fingerprint.py::test_replaced_symbols_read_from_source_fit_megatrons_calls"]
PATCH = '''"""Replaces the router's routing, as MoE frameworks do."""

from megatron.core.transformer.moe.router import TopKRouter


def routing(self, logits):
    return logits, logits


def apply():
    TopKRouter.routing = routing
'''


def framework(root: Path) -> Path:
    (root / "readfw").mkdir(parents=True)
    (root / "readfw" / "__init__.py").write_text("")
    (root / "readfw" / "patch.py").write_text(PATCH)
    declaration = root / "megatron-conformance.toml"
    declaration.write_text('[subject]\nsource_root = "."\nadapter_package = "readfw"\n')
    return declaration


@pytest.mark.parametrize("broken", [True, False], ids=["reader-raises", "reader-as-shipped"])
def test_a_reader_error_ends_the_session_with_the_gates_own_status_and_line(tmp_path: Path, broken: bool) -> None:
    declaration = framework(tmp_path / "fw")
    extra = ["-p", "tests.broken_reader"] if broken else []
    run = run_target_cases(SESSION, CASES, tmp_path / "run", declaration, extra=extra)
    if not broken:
        assert run.returncode in (0, 1) and "the gate's own source reader failed" not in run.output, run.output[-4000:]
        written = [path.read_text() for path in (tmp_path / "run").rglob("replaced_symbols.json")]
        assert "Traceback" not in run.output and any("TopKRouter" in text for text in written), run.output[-4000:]
        return
    assert run.returncode == GATE_ERROR_STATUS, run.output[-4000:]
    patch = tmp_path / "fw" / "readfw" / "patch.py"
    line = f"the gate's own source reader failed at {patch}:11 (reading `TopKRouter.routing = routing`)"
    assert line in run.output and "IndexError" in run.output, run.output[-4000:]
    assert "Traceback" not in run.output and "broken_reader.py" not in run.output, run.output[-4000:]
    assert f"target {SESSION} | contract api-fingerprint" not in run.output, "a reader error read as a red"
