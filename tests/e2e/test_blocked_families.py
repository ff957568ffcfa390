"""What stops a family from checking anything is a red of that family, never an INTERNALERROR or a silent green: a
Megatron whose ``finalize_model_grads`` raises at import, a declaration whose ``apply`` needs an argument nothing
supplies, and a family the declaration requires without its role. Families that did not run are listed last."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from harness.reports.compatibility import write_reports
from harness.targets.megatron_names import FINALIZE_MODULE
from tests.pytest_helpers import run_target_cases, target_python

SESSION = "megatron-0.15"
FAMILIES = ("smoke", "chunk-splitting", "equivalence", "model-provider", "api-fingerprint", "import-side-effects")
SEEDED_RAISE = "seeded: this finalize_model_grads cannot be imported"


def broken_megatron(tmp_path: Path) -> Path:
    """A copy of the target's ``megatron`` package whose ``finalize_model_grads`` raises at import; its directory goes
    first on ``PYTHONPATH``."""
    python = target_python(SESSION)
    where = subprocess.run(
        [
            str(python),
            "-c",
            "import importlib.util; print(importlib.util.find_spec('megatron').submodule_search_locations[0])",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    root = tmp_path / "broken"
    shutil.copytree(where, root / "megatron")
    module = root / "megatron" / (FINALIZE_MODULE.removeprefix("megatron.").replace(".", "/") + ".py")
    module.write_text(f"raise RuntimeError({SEEDED_RAISE!r})\n" + module.read_text())
    return root


def write_declaration(tmp_path: Path, name: str, text: str) -> Path:
    """A framework of one package (``fw``) whose patch binds a replacement through ``install(chunk_bytes)``."""
    package = tmp_path / "fw" / "fw"
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text("")
    (package / "patch.py").write_text(
        "import importlib\n\n"
        f"_finalize = importlib.import_module({FINALIZE_MODULE!r})\n"
        "_original = _finalize._allreduce_non_tensor_model_parallel_grads\n"
        "BUDGET = 1 << 20\n\n\n"
        "def install(chunk_bytes):\n"
        "    _finalize._allreduce_non_tensor_model_parallel_grads = _original\n\n\n"
        "def uninstall():\n"
        "    _finalize._allreduce_non_tensor_model_parallel_grads = _original\n"
    )
    path = tmp_path / "fw" / f"{name}.toml"
    path.write_text(text)
    return path


def test_a_megatron_that_cannot_be_imported_is_red_on_every_family(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    env = {"PYTHONPATH": str(broken_megatron(tmp_path))}
    run = run_target_cases(SESSION, ["cases"], reports / SESSION, env=env)
    assert run.returncode == 1 and "INTERNALERROR" not in run.output, run.output[-3000:]
    failed = run.failed()
    assert sorted(failed) == sorted(f"{name.replace('-', '_')}_could_not_run" for name in FAMILIES), failed
    for name in FAMILIES:
        text = failed[f"{name.replace('-', '_')}_could_not_run"]
        assert f"[{SESSION}] {name}: megatron-core 0.15.3 cannot be imported" in text and SEEDED_RAISE in text, text
        assert f"repro: nox -R -s {SESSION} -- cases/test_{name.replace('-', '_')}.py" in text, text
    summary = json.loads((reports / SESSION / "summary.json").read_text())
    assert summary["counts"]["failed"] == len(FAMILIES) and summary["exit_status"] == 1, summary
    assert len(summary["blocked"]) == 1 and SEEDED_RAISE in summary["blocked"][0], summary
    assert set(summary["not_run"]) == set(FAMILIES), summary["not_run"]
    _, markdown, _ = write_reports(reports)
    assert "cannot be imported" in markdown.read_text()


FROM_SOURCE = "test_replaced_symbols_read_from_source_"
"""The api-fingerprint cases that read only source: they run where the subject cannot be loaded."""


def test_a_subject_whose_apply_needs_an_argument_is_one_red_per_family_naming_the_key(tmp_path: Path) -> None:
    declaration = write_declaration(
        tmp_path,
        "needs-argument",
        'subject = { source_root = ".", adapter_package = "fw" }\nbudget = { global = "BUDGET" }\n'
        '[patch]\nmodule = "fw.patch"\napplied = "call"\napply = "install"\nundo = "uninstall"\n',
    )
    run = run_target_cases(SESSION, ["cases"], tmp_path / "report", subject=declaration)
    assert run.returncode == 1 and "INTERNALERROR" not in run.output, run.output[-3000:]
    failed = run.failed()
    assert sorted(failed) == sorted(f"{n.replace('-', '_')}_could_not_run" for n in FAMILIES if n != "smoke"), failed
    expected = (
        f"{declaration}: key 'patch.apply': install() needs chunk_bytes, which nothing supplies: "
        "if 'chunk_bytes' is the byte budget, declare budget.argument = \"chunk_bytes\""
    )
    assert all(f"the subject cannot be loaded: {expected}" in text for text in failed.values()), failed
    assert all("repro: MEGATRON_CONFORMANCE_SUBJECT=" in text for text in failed.values()), failed
    read = {name: verdict for name, (verdict, _) in run.verdicts.items() if name.startswith(FROM_SOURCE)}
    assert read and set(read.values()) == {"skipped"}, read  # its source patches nothing of Megatron
    others = [verdict for name, (verdict, _) in run.verdicts.items() if name.startswith("test_") and name not in read]
    assert set(others) == {"passed"}, run
    assert "nothing of the subject was checked" in run.output


def test_a_family_left_out_is_said_and_a_required_one_is_red(tmp_path: Path) -> None:
    left_out = write_declaration(tmp_path, "no-patch", 'subject = { source_root = ".", adapter_package = "fw" }\n')
    run = run_target_cases(SESSION, ["cases"], tmp_path / "left-out", subject=left_out)
    assert run.returncode == 0, run.output[-3000:]
    last = run.output[run.output.index("families that did not run") :]
    assert f"equivalence: every case skipped: not declared: equivalence needs [patch] in {left_out}" in last, last
    summary = json.loads((tmp_path / "left-out" / "summary.json").read_text())
    assert set(summary["not_run"]) == {"chunk-splitting", "equivalence", "model-provider", "api-fingerprint"}
    required = write_declaration(
        tmp_path, "required", 'subject = { source_root = ".", adapter_package = "fw", require = ["equivalence"] }\n'
    )
    run = run_target_cases(SESSION, ["cases"], tmp_path / "required", subject=required)
    assert run.returncode == 1, run.output[-3000:]
    assert list(run.failed()) == ["equivalence_could_not_run"], run.failed()
    assert f"{required} requires equivalence (subject.require) but declares no [patch]" in run.output
