"""Real adapters, checked from their declarations alone (``tests/frameworks/``), on real targets.

``legacyrl`` has the old shape: its adapter package's bootstrap imports the patch module, whose body re-binds
Megatron's all-reduce, and its provider wrapper has a fixed signature. It must be red exactly on the import of its
adapter (naming both re-binds) and, where Megatron passes ``config=``, on the provider's call shapes. ``modernrl`` has
the new shape (explicit apply/undo, a ``**kwargs`` wrapper, a DeepEP patch it declares) and must be green, with the
properties it does not promise listed as advisories. Seeded declarations show the declaration's own mistakes, and a
wrapper that un-freezes when applied twice, are red with one line naming what is wrong.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from harness.targets.matrix import load_matrix
from tests.pytest_helpers import ROOT, RunVerdicts, SharedRuns, on_one_target, run_target_cases

FRAMEWORKS = ROOT / "tests" / "frameworks"
TARGETS = ("megatron-0.13", "megatron-0.15", "megatron-0.16", "megatron-0.19")
DECLARATION = "megatron-conformance.toml"
LINE_GOAL = 30
ADAPTER_IMPORT = "test_importing_the_adapter_with_real_megatron_changes_nothing"
FRAMEWORK_IMPORT = "test_importing_the_adapter_as_the_framework_does_changes_nothing"
ADVISORY_CASES = ("test_invalid_budget_is_a_value_error", "test_greedy_tightness")
REBOUND = ("_allreduce_non_tensor_model_parallel_grads", "_allreduce_layernorm_grads")


def passes_config(session: str) -> bool:
    """Whether the target's training loop passes ``config=`` to the provider (megatron-core 0.16 on)."""
    target = load_matrix(ROOT / "matrix.yaml").target(session)
    return any("config" in keywords for keywords in target.provider.calls.values())


def run_declared(session: str, declaration: Path, tmp_path: Path, selection: list[str] | None = None) -> RunVerdicts:
    return run_target_cases(session, selection or ["cases"], tmp_path, subject=declaration)


def summary(tmp_path: Path) -> dict:
    return json.loads((tmp_path / "summary.json").read_text())


MODERN, LEGACY = (FRAMEWORKS / name / DECLARATION for name in ("modernrl", "legacyrl"))
ALL_CASES = ("cases",)


@pytest.fixture(scope="module")
def both_forms(tmp_path_factory: pytest.TempPathFactory) -> SharedRuns:
    """The new form and the old one on each target in one warm run."""
    plan = [(session, ALL_CASES, declaration) for session in TARGETS for declaration in (MODERN, LEGACY)]
    return SharedRuns(plan, lambda: tmp_path_factory.mktemp("forms"))


@pytest.mark.parametrize("session", on_one_target(TARGETS, ["megatron-0.16"]))
def test_the_new_form_is_green_with_its_advisories_listed(session: str, both_forms: SharedRuns) -> None:
    run = both_forms.run(session, ALL_CASES, MODERN)
    assert run.returncode == 0, f"modernrl on {session}: {run.failed() or run.output[-3000:]}"
    assert run.report_dir is not None
    recorded = summary(run.report_dir)
    assert recorded["subject_kind"] == "declaration"
    assert 0 < recorded["declaration_lines"] <= LINE_GOAL
    advised = {advisory["case"].split("::")[-1].split("[")[0] for advisory in recorded["advisories"]}
    assert advised and advised <= set(ADVISORY_CASES), recorded["advisories"]
    assert all(advisory["repro"].startswith("MEGATRON_CONFORMANCE_SUBJECT=") for advisory in recorded["advisories"])
    waived = {(waiver["kind"], waiver["name"]) for waiver in recorded["waivers"]}
    assert ("class-attribute", "deep_ep.Buffer.__init__") in waived
    not_declared = [name for name, (verdict, text) in run.verdicts.items() if "not declared" in text]
    assert not not_declared
    scale = {
        f["text"].split(" (", 1)[1].split(",")[0]: f["text"] for f in recorded["findings"] if f["family"] == "scale"
    }
    assert set(scale) == {"llama-70b", "deepseek-v3"}, "the declared [scale] models were not measured"
    assert "flattens 5,275,648 B (5 MiB) in 1 collective" in scale["llama-70b"]
    assert "budget 1,073,741,824 B (1 GiB) (the value of GRAD_COALESCE_CHUNK_BYTES after import)" in scale["llama-70b"]


@pytest.mark.parametrize("session", on_one_target(TARGETS, ["megatron-0.16"]))
def test_the_old_form_is_red_exactly_on_its_import_and_newer_provider_shapes(
    session: str, both_forms: SharedRuns
) -> None:
    run = both_forms.run(session, ALL_CASES, LEGACY)
    assert run.report_dir is not None
    failed = run.require_red(f"legacyrl on {session}")
    expected = {ADAPTER_IMPORT, FRAMEWORK_IMPORT}
    if passes_config(session):
        shapes = load_matrix(ROOT / "matrix.yaml").target(session).provider.calls
        expected |= {"test_keywords_reach_the_inner_provider"}
        expected |= {f"test_real_gpt_model_through_the_wrapper[{shape}]" for shape in shapes}
    assert set(failed) == expected, {name: text[:400] for name, text in failed.items()}
    for name in REBOUND:
        assert f"finalize_model_grads.{name}: re-bound" in failed[ADAPTER_IMPORT]
        assert f"finalize_model_grads.{name}: re-bound" in failed[FRAMEWORK_IMPORT]
    if passes_config(session):
        assert "keyword 'config'" in failed["test_keywords_reach_the_inner_provider"]
    advised = {advisory["case"].split("::")[-1] for advisory in summary(run.report_dir)["advisories"]}
    assert "test_keywords_of_call_shapes_the_subject_does_not_meet_here" in advised, advised


def copy_framework(name: str, tmp_path: Path) -> Path:
    root = tmp_path / "framework"
    shutil.copytree(FRAMEWORKS / name, root, ignore=shutil.ignore_patterns("__pycache__"))
    return root


UNFREEZING_RULES = '''

def _freeze_parameters(model, args):
    """The train-only rule switches matching parameters back on: under a second wrapper it un-freezes what the
    inner wrapper froze."""
    train_only = [re.compile(p) for p in getattr(args, "only_train_params_name_list", None) or []]
    freeze = [re.compile(p) for p in getattr(args, "freeze_params_name_list", None) or []]
    for module in model if isinstance(model, list | tuple) else [model]:
        for name, param in module.named_parameters():
            if train_only:
                param.requires_grad = any(p.search(name) for p in train_only)
            if any(p.search(name) for p in freeze):
                param.requires_grad = False
'''


@pytest.mark.parametrize("session", on_one_target(["megatron-0.13", "megatron-0.16"], ["megatron-0.16"]))
def test_a_wrapper_that_unfreezes_when_applied_twice_is_red_behind_a_signature_red(
    session: str, tmp_path: Path
) -> None:
    root = copy_framework("legacyrl", tmp_path)
    provider = root / "legacyrl" / "backends" / "megatron_utils" / "model_provider.py"
    provider.write_text(provider.read_text() + UNFREEZING_RULES)
    # Nested wrappers are the framework's own promise: declared, their freeze rules are mandatory.
    declaration = root / DECLARATION
    declaration.write_text(declaration.read_text().replace("[provider]\n", "[provider]\nnested = true\n", 1))
    run = run_declared(session, declaration, tmp_path / "report", ["cases/test_model_provider.py"])
    failed = run.require_red(f"unfreezing legacyrl on {session}")
    text = failed.get("test_returns_the_inner_model_with_freeze_rules_applied", "")
    assert "freeze rules" in text and "wrongly left trainable" in text, failed


def seeded_declaration(tmp_path: Path, old: str, new: str) -> Path:
    root = copy_framework("modernrl", tmp_path)
    path = root / DECLARATION
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    return path


def test_a_rule_name_the_wrapper_never_reads_is_red_naming_file_and_key(tmp_path: Path) -> None:
    path = seeded_declaration(tmp_path, 'freeze = "freeze_params_name_list"', 'freeze = "frozen_param_regexes"')
    run = run_declared("megatron-0.15", path, tmp_path / "report", ["cases/test_model_provider.py"])
    failed = run.require_red("unread rule name")
    text = failed["test_declared_rule_names_are_read"]
    assert f"{path}: key 'provider.freeze': the wrapper never reads args.frozen_param_regexes" in text


@pytest.mark.parametrize(
    ("old", "new", "key", "reason"),
    [
        ("[provider]\n", "[provider]\nwrapper = 1\n", "provider.wrapper", "unknown key"),
        ('applied = "call"\n', "", "patch.applied", "missing required key"),
        (
            '_get_main_grad_attr" = "calls"',
            '_get_main_grad_attr" = "call"',
            "megatron_symbols.megatron.core.distributed.finalize_model_grads:_get_main_grad_attr",
            "'call' is not a usage: expected one of imports, calls, reads, replaces, relies",
        ),
        ('freeze = "', 'nested = "yes"\nfreeze = "', "provider.nested", "must be true or false"),
    ],
)
def test_a_bad_declaration_stops_the_session_with_one_line(
    tmp_path: Path, old: str, new: str, key: str, reason: str
) -> None:
    path = seeded_declaration(tmp_path, old, new)
    run = run_declared("megatron-0.15", path, tmp_path / "report", ["cases/test_smoke.py"])
    assert run.returncode == 4, run.output[-2000:]
    lines = [line for line in run.output.splitlines() if f"{path}: key '{key}': " in line]
    assert len(lines) == 1 and reason in lines[0], run.output[-2000:]


def test_a_name_that_does_not_resolve_is_a_red_of_every_family_needing_the_subject(tmp_path: Path) -> None:
    """A declaration that reads but cannot be built: each blocked family is one red naming the key; smoke, which
    needs no subject, still runs."""
    path = seeded_declaration(tmp_path, "grad_chunking:_split_into_chunks", "grad_chunking:_split_in_chunks")
    run = run_declared(
        "megatron-0.15", path, tmp_path / "report", ["cases/test_chunk_splitting.py", "cases/test_smoke.py"]
    )
    failed = run.require_red("a splitter name that does not resolve")
    assert list(failed) == ["chunk_splitting_could_not_run"], failed
    assert f"the subject cannot be loaded: {path}: key 'splitter.function': " in failed["chunk_splitting_could_not_run"]
    assert "no attribute" in failed["chunk_splitting_could_not_run"]
    assert all(run.verdicts[name][0] == "passed" for name in SMOKE_CASES), run.verdicts


def test_expected_failures_in_the_declaration_are_strict_and_stale_ones_reported(tmp_path: Path) -> None:
    root = copy_framework("legacyrl", tmp_path)
    path = root / DECLARATION
    imports = [f"cases/test_import_side_effects.py::{case}" for case in (ADAPTER_IMPORT, FRAMEWORK_IMPORT)]
    listed = [*imports, "cases/test_nowhere.py::test_gone"]
    path.write_text(path.read_text() + f'\n[expected_failures]\n"megatron-0.13" = {json.dumps(listed)}\n')
    run = run_declared("megatron-0.13", path, tmp_path / "report", ["cases/test_import_side_effects.py"])
    assert run.returncode == 0, run.output[-3000:]
    assert run.verdicts[ADAPTER_IMPORT][0] == run.verdicts[FRAMEWORK_IMPORT][0] == "xfailed"
    recorded = summary(tmp_path / "report")
    assert recorded["stale_expected_failures"] == ["cases/test_nowhere.py::test_gone"]
    assert f"{path} [expected_failures] megatron-0.13: 'cases/test_nowhere.py::test_gone' matches no test" in run.output


def test_a_role_left_out_is_not_declared_never_green(tmp_path: Path) -> None:
    root = copy_framework("modernrl", tmp_path)
    path = root / DECLARATION
    text = path.read_text()
    path.write_text(text.replace(text[text.index("[provider]") : text.index("[megatron_symbols]")], ""))
    run = run_declared(
        "megatron-0.15", path, tmp_path / "report", ["cases/test_model_provider.py", "cases/test_smoke.py"]
    )
    # The one family selected that checks the subject checked nothing: a red exit, with its line and the reason.
    assert run.returncode == 1 and "nothing of the subject was checked" in run.output, run.output[-3000:]
    assert f"model-provider: every case skipped: not declared: model-provider needs [provider] in {path}" in run.output
    assert summary(tmp_path / "report")["not_run"]["model-provider"].startswith("every case skipped: not declared")
    smoke = {name for name in run.verdicts if name in SMOKE_CASES}
    assert smoke == set(SMOKE_CASES) and all(run.verdicts[name][0] == "passed" for name in smoke)
    provider = {name: case for name, case in run.verdicts.items() if name not in SMOKE_CASES}
    reason = f"not declared: model-provider needs [provider] in {path}"
    assert provider and all(verdict == "skipped" and reason in why for verdict, why in provider.values()), provider


SMOKE_CASES = (
    "test_installed_versions_are_the_pins",
    "test_megatron_is_imported_from_the_installed_distribution",
    "test_torch_build_is_recorded_as_torch_reports_it",
)
