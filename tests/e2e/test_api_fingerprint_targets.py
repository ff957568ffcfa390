"""The api-fingerprint family on real target venvs: seeded subjects turn it red, a candidate with a renamed
parameter is caught by the case and named by the api-diff, and the drift from 0.16 to the newest target."""

from __future__ import annotations

import base64
import hashlib
import os
import re
import subprocess
import sys
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from harness.plugin.command import case_command, run_cases
from harness.reports.api_diff import (
    NEW_REDUCTION,
    READS_ADDED,
    compare,
    render_markdown,
)
from harness.targets.matrix import load_matrix
from tests.pytest_helpers import (
    ROOT,
    SEEDED,
    RunVerdicts,
    download_megatron_wheel,
    run_target_cases,
    target_python,
)

FINALIZE = "megatron.core.distributed.finalize_model_grads"
UPSTREAM = f"{FINALIZE}:_allreduce_non_tensor_model_parallel_grads"
ALIAS = f"{FINALIZE}:_allreduce_layernorm_grads"
BASE = "megatron-0.15"
BASE_VERSION = "0.15.3"
CANDIDATE = "megatron-candidate"
RENAMED = ("tp_group", "tp_process_group")


CALL_SITES = "test_megatrons_calls_bind_to_the_replacements"
SIGNATURE = "test_replacements_accept_every_call_upstream_accepts"
SEEDED_BREAKS = {
    "api_fingerprint_undeclared_symbol": (
        {"test_declaration_covers_every_megatron_use_in_the_source"},
        f"{FINALIZE}._get_main_grad_attr (at allreduce.py:",
    ),
    # Megatron's own call passes tp_group: the mandatory call-site red; the signature advisory is red too, the
    # seeded subject being strict.
    "api_fingerprint_replacement_without_tp_group": (
        {CALL_SITES, SIGNATURE},
        f"{UPSTREAM}: Megatron's call at megatron/core/distributed/finalize_model_grads.py:452 (finalize_model_grads: "
        "3 positional) does not bind to allreduce_non_tensor_model_parallel_grads: too many positional arguments",
    ),
}


@pytest.mark.parametrize("seeded", sorted(SEEDED_BREAKS))
def test_seeded_subject_turns_the_family_red(seeded: str, tmp_path: Path) -> None:
    run = run_target_cases(BASE, ["cases/test_api_fingerprint.py"], tmp_path, subject=SEEDED / f"{seeded}.py")
    cases, named = SEEDED_BREAKS[seeded]
    failed = run.require_red(seeded)
    assert set(failed) == cases, f"{seeded}: expected {sorted(cases)} to fail, failed: {sorted(failed)}"
    text = "\n".join(failed.values())
    assert named in text and f"[{BASE}] api-fingerprint" in text, text[-3000:]
    assert "contract api-fingerprint | symbol MEGATRON_SYMBOLS" in run.output


COPIED_AT = "c36be900cd564ade"
"""Upstream's all-reduce body hash on 0.15 through 0.19, which ``api_fingerprint_copied_body_hash_stale`` declares."""
COPY_CASE = "test_copied_upstream_bodies_are_unchanged"


@pytest.mark.parametrize(("session", "red"), [("megatron-0.13", True), (BASE, False)])
def test_a_declared_copy_of_an_upstream_body_is_red_where_upstream_differs(
    session: str, red: bool, tmp_path: Path
) -> None:
    seeded = "api_fingerprint_copied_body_hash_stale"
    selection = [f"cases/test_api_fingerprint.py::{COPY_CASE}"]
    run = run_target_cases(session, selection, tmp_path, subject=SEEDED / f"{seeded}.py")
    if not red:
        assert run.returncode == 0 and run.verdicts[COPY_CASE][0] == "passed", run.output[-3000:]
        return
    failed = run.require_red(seeded)
    assert list(failed) == [COPY_CASE], sorted(failed)
    assert re.search(
        rf"\[{re.escape(session)}\] api-fingerprint: upstream code the subject copied is no longer what it copied:\n"
        rf"\s+upstream `{re.escape(UPSTREAM)}` changed since the subject copied it: "
        rf"body hash (?!{COPIED_AT})[0-9a-f]{{16}} on this target, the subject declares {COPIED_AT}",
        failed[COPY_CASE],
    ), failed[COPY_CASE][-3000:]
    assert f"target {session} | contract api-fingerprint | symbol MEGATRON_SYMBOLS" in run.output


def test_a_subject_that_declares_no_copied_bodies_skips_the_case_saying_so(tmp_path: Path) -> None:
    """Skipped, saying why; and since that one case was all the run selected, the run checked nothing of the subject,
    which is a red exit with its line."""
    run = run_target_cases(BASE, [f"cases/test_api_fingerprint.py::{COPY_CASE}"], tmp_path)
    verdict, text = run.verdicts[COPY_CASE]
    assert verdict == "skipped", run.output[-3000:]
    assert "the subject declares no UPSTREAM_BODY_HASHES" in text, text
    assert run.returncode == 1 and "nothing of the subject was checked" in run.output, run.output[-3000:]


def _rename_parameter(source: str) -> str:
    """Rename ``tp_group`` inside ``_allreduce_non_tensor_model_parallel_grads`` only, as an upstream rename would."""
    start = source.index("def _allreduce_non_tensor_model_parallel_grads(")
    end = source.index("\n\n\n", start)
    function = re.sub(rf"\b{RENAMED[0]}\b", RENAMED[1], source[start:end])
    assert function != source[start:end], "upstream no longer has tp_group: the candidate tests nothing"
    return source[:start] + function + source[end:]


def _rewrite_wheel(source: Path, target: Path, member: str, edit: Callable[[str], str]) -> None:
    """Copy the wheel with one file edited and its RECORD line updated, so pip installs it as a valid wheel."""
    with zipfile.ZipFile(source) as original, zipfile.ZipFile(target, "w") as rewritten:
        data = edit(original.read(member).decode()).encode()
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        for info in original.infolist():
            content = original.read(info.filename)
            if info.filename == member:
                content = data
            elif info.filename.endswith(".dist-info/RECORD"):
                lines = content.decode().splitlines()
                content = "\n".join(
                    f"{member},sha256={digest},{len(data)}" if line.startswith(f"{member},") else line for line in lines
                ).encode()
            rewritten.writestr(info, content)


def _site_packages(python: Path) -> Path:
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    return Path(subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True).stdout.strip())


@dataclass(frozen=True)
class Candidate:
    """A candidate target: its interpreter, the wheel it was installed from, and a matrix naming that wheel."""

    python: Path
    wheel: Path
    matrix: Path


@pytest.fixture(scope="module")
def candidate(tmp_path_factory: pytest.TempPathFactory) -> Candidate:
    """A venv holding megatron-core 0.15.3 rebuilt with the parameter renamed, and a matrix naming it as a wheel.

    Only the candidate wheel is installed into the venv; torch, numpy and pytest come from the megatron-0.15 venv
    through a ``.pth`` file, which keeps the build at seconds. pip is the tests' own (target venvs built by uv have
    none).
    """
    work = tmp_path_factory.mktemp("candidate")
    base = target_python(BASE)
    original = download_megatron_wheel(BASE_VERSION, work / "download")
    (work / "wheel").mkdir()
    wheel = work / "wheel" / original.name
    _rewrite_wheel(original, wheel, "megatron/core/distributed/finalize_model_grads.py", _rename_parameter)
    venv = work / "venv"
    subprocess.run([str(base), "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    install = [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q", str(wheel)]
    subprocess.run(install, check=True, timeout=600)
    (_site_packages(python) / "megatron_conformance_base.pth").write_text(f"{_site_packages(base)}\n")
    entry = {
        "session": CANDIDATE,
        "megatron": {"wheel": str(wheel), "version": f"=={BASE_VERSION}"},
        "python": "3.11",
        "torch": "==2.13.0",
        "numpy": "<2",
        "expected_failures": str(ROOT / f"cases/expected_failures/{BASE}.txt"),
        "provider": {"process_group_keyword": "pg_collection", "calls": {"plain": ["pre_process", "post_process"]}},
    }
    matrix = work / "matrix.yaml"
    matrix.write_text(yaml.safe_dump({"targets": [entry]}))
    return Candidate(python, wheel, matrix)


def test_api_diff_reports_the_renamed_parameter_and_asks_for_a_review(candidate: Candidate, tmp_path: Path) -> None:
    pythons = {BASE: target_python(BASE), CANDIDATE: candidate.python}
    report = compare(pythons, "harness.reference", tmp_path / "cache")
    renamed = f"`{RENAMED[0]}` → `{RENAMED[1]}` (position 3)"
    changes = {
        (row["symbol"], row["change"], row["detail"] if row["change"] != "body changed" else "")
        for row in report["changes"]
    }
    assert changes == {
        (UPSTREAM, "parameter renamed", renamed),
        (ALIAS, "parameter renamed", renamed),
        (UPSTREAM, "body changed", ""),
        (ALIAS, "body changed", ""),
    }
    assert {row["symbol"] for row in report["review"]} == {UPSTREAM, ALIAS}
    base, changed = report["targets"]
    assert base["megatron_core"] == changed["megatron_core"] == BASE_VERSION and base["key"] != changed["key"]
    assert changed["origin"] == str(candidate.wheel)
    markdown = render_markdown(report)
    assert "## Review your copy" in markdown
    diff = next(row["diff"] for row in report["review"] if row["symbol"] == UPSTREAM)
    assert diff.startswith(f"--- {BASE}: megatron/core/distributed/finalize_model_grads.py:"), diff[:300]
    assert f"\n+++ {CANDIDATE}: megatron/core/distributed/finalize_model_grads.py:" in diff, diff[:300]
    assert f"\n-    {RENAMED[0]}: " in diff and f"\n+    {RENAMED[1]}: " in diff, diff
    assert "<summary>upstream's body, diff</summary>" in markdown and f"  +    {RENAMED[1]}: " in markdown

    again = compare(pythons, "harness.reference", tmp_path / "cache")
    assert [target["cached"] for target in again["targets"]] == [True, True]
    assert again["changes"] == report["changes"]


def test_fingerprint_case_goes_red_on_the_candidate_naming_symbol_and_mismatch(
    candidate: Candidate, tmp_path: Path
) -> None:
    command = case_command(
        CANDIDATE, tmp_path, ["cases/test_api_fingerprint.py"], python=candidate.python, matrix=candidate.matrix
    )
    run = RunVerdicts.of(run_cases(command, timeout=600))
    failed = run.failed()
    case = SIGNATURE  # an advisory, red for the strict reference subject: Megatron passes the renamed one by position
    assert run.returncode == 1 and list(failed) == [case], (
        f"exit {run.returncode}, failed {sorted(failed)}\n" + (run.output[-4000:])
    )
    for symbol in (UPSTREAM, ALIAS):
        assert (
            f"{symbol} (model, config, {RENAMED[1]}=None) replaced by allreduce_non_tensor_model_parallel_grads"
            f"(model, config, {RENAMED[0]}=None): upstream's parameter 3 '{RENAMED[1]}' is named '{RENAMED[0]}'"
        ) in failed[case], failed[case][-3000:]
    assert f"[{CANDIDATE}] api-fingerprint" in failed[case]
    assert f"target {CANDIDATE} | contract api-fingerprint | symbol MEGATRON_SYMBOLS" in run.output


def test_api_diff_tells_how_to_build_a_missing_target(tmp_path: Path) -> None:
    entry = {
        "session": "megatron-unbuilt",
        "megatron": {"pypi": "megatron-core==0.15.3"},
        "python": "3.11",
        "torch": "==2.13.0",
        "expected_failures": str(ROOT / f"cases/expected_failures/{BASE}.txt"),
        "provider": {"process_group_keyword": None, "calls": {"plain": ["pre_process", "post_process"]}},
    }
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(yaml.safe_dump({"targets": [entry]}))
    env = {**os.environ, "MEGATRON_CONFORMANCE_MATRIX": str(matrix), "MEGATRON_CONFORMANCE_REPORTS": str(tmp_path)}
    command = [sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py"), "-s", "api-diff", "--"]
    completed = subprocess.run(
        [*command, "megatron-unbuilt", "megatron-0.15"], env=env, capture_output=True, text=True, timeout=120
    )
    assert completed.returncode != 0
    assert "build it with: nox -s megatron-unbuilt" in completed.stdout + completed.stderr


def test_api_diff_from_0_16_to_the_newest_target_names_the_new_reduction_and_config_reads(tmp_path: Path) -> None:
    """Read from the real packages: 0.19 added a coalesced reduction right after the patched call in
    ``finalize_model_grads``, and config attributes that call reads."""
    newest = load_matrix(ROOT / "matrix.yaml").targets[-1].session
    pythons = {"megatron-0.16": target_python("megatron-0.16"), newest: target_python(newest)}
    report = compare(pythons, "harness.reference", tmp_path / "cache")
    findings = [row["detail"] for row in report["review"] if row["change"] == NEW_REDUCTION]
    assert len(findings) == 1, report["review"]
    assert findings[0].startswith(
        "`finalize_model_grads` now calls `_allreduce_replicated_grads_over_gtp_remat_group` right after the patched "
        "`_allreduce_non_tensor_model_parallel_grads`: a new coalesced reduction"
    )
    assert "does not cover" in findings[0]
    reads = [row["detail"] for row in report["changes"] if row["change"] == READS_ADDED]
    assert reads and all(f"`{name}`" in reads[0] for name in ("gtp_weight_remat_size", "calculate_per_token_loss"))
    assert findings[0] in render_markdown(report).split("## Changes")[0], "the finding heads the review"
