"""The import side-effect family goes red, naming the kind and the name, for each seeded subject."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.pytest_helpers import SEEDED, run_target_cases

SESSION = "megatron-0.15"
FINALIZE = "megatron.core.distributed.finalize_model_grads"
SEEDED_BREAKS = {
    "import_patches_megatron": (
        "test_importing_the_adapter_with_",
        f"module-attribute {FINALIZE}._allreduce_layernorm_grads",
    ),
    "import_reads_env": ("test_importing_the_adapter_with_", "env-read ADAPTER_CHUNK_BYTES"),
    "import_logs": ("test_importing_the_adapter_with_", "log-record adapter.seeded"),
    "import_sets_logger_level": ("test_importing_the_adapter_with_", "logger-config megatron.core"),
    "import_starts_thread": ("test_importing_the_adapter_with_", "thread adapter-watcher"),
    "import_inserts_sys_path": ("test_importing_the_adapter_with_", "sys-path sys.path"),
    "import_install_one_name": ("test_install_rebinds_exactly_the_documented_names", "_allreduce_layernorm_grads"),
    "import_uninstall_keeps_alias": (
        "test_install_rebinds_exactly_the_documented_names",
        f"after uninstall() {FINALIZE}._allreduce_layernorm_grads is",
    ),
}


@pytest.mark.parametrize("seeded", sorted(SEEDED_BREAKS))
def test_seeded_subject_turns_the_family_red(seeded: str, tmp_path: Path) -> None:
    run = run_target_cases(SESSION, ["cases/test_import.py"], tmp_path, subject=SEEDED / f"{seeded}.py")
    case, named = SEEDED_BREAKS[seeded]
    failed = run.require_red(seeded)
    hits = [name for name, text in failed.items() if name.startswith(case) and named in text]
    assert hits, f"{seeded}: no failure of {case} names {named!r}; failed: {sorted(failed)}\n{run.output[-4000:]}"
    assert "contract import-side-effects | symbol ADAPTER_PACKAGE" in run.output


def test_reference_subject_is_green(tmp_path: Path) -> None:
    run = run_target_cases(SESSION, ["cases/test_import.py"], tmp_path)
    assert run.returncode == 0 and not run.failed(), run.output[-3000:]
