"""The import side-effect family goes red, naming the kind and the name, for each seeded subject."""

from __future__ import annotations

import pytest

from harness.formats.environment import REFERENCE_SUBJECT
from tests.pytest_helpers import SEEDED, SharedRuns

SESSION = "megatron-0.15"
SELECTION = ("cases/test_import_side_effects.py",)
FINALIZE = "megatron.core.distributed.finalize_model_grads"
SEEDED_BREAKS = {
    "import_side_effects_patches_megatron": (
        "test_importing_the_adapter_with_",
        f"module-attribute {FINALIZE}._allreduce_layernorm_grads",
    ),
    "import_side_effects_reads_env": ("test_importing_the_adapter_with_", "env-read ADAPTER_CHUNK_BYTES"),
    "import_side_effects_logs": ("test_importing_the_adapter_with_", "log-record adapter.seeded"),
    "import_side_effects_sets_logger_level": ("test_importing_the_adapter_with_", "logger-config megatron.core"),
    "import_side_effects_starts_thread": ("test_importing_the_adapter_with_", "thread adapter-watcher"),
    "import_side_effects_inserts_sys_path": ("test_importing_the_adapter_with_", "sys-path sys.path"),
    "import_side_effects_swaps_code": (
        "test_importing_the_adapter_with_",
        f"function-state {FINALIZE}.finalize_model_grads: __code__ replaced",
    ),
    "import_side_effects_changes_defaults": (
        "test_importing_the_adapter_with_",
        f"function-state {FINALIZE}.finalize_model_grads: __defaults__ replaced",
    ),
    "import_side_effects_changes_kwdefaults": (
        "test_importing_the_adapter_with_",
        "function-state megatron.core.utils.log_single_rank: __kwdefaults__ replaced",
    ),
    "import_side_effects_mutates_megatron_dict": (
        "test_importing_the_adapter_with_",
        "mutable-global megatron.core.tensor_parallel.layers._MODEL_PARALLEL_ATTRIBUTE_DEFAULTS: dict changed in place",
    ),
    "import_side_effects_appends_megatron_list": (
        "test_importing_the_adapter_with_",
        "mutable-global megatron.core.tensor_parallel.__all__: list changed in place",
    ),
    "import_side_effects_changes_dataclass_default": (
        "test_importing_the_adapter_with_",
        "class-attribute megatron.core.distributed.distributed_data_parallel_config.DistributedDataParallelConfig"
        ".grad_reduce_in_fp32: dataclass default False -> True",
    ),
    "import_side_effects_registers_atexit": (
        "test_importing_the_adapter_with_",
        "process-hook atexit: callback registered",
    ),
    "import_side_effects_installs_signal_handler": (
        "test_importing_the_adapter_with_",
        "process-hook signal.SIGUSR1: handler",
    ),
    "import_side_effects_arms_timer": (
        "test_importing_the_adapter_with_",
        "process-hook signal.ITIMER_REAL: disarmed -> fires in",
    ),
    "import_side_effects_adds_gc_callback": (
        "test_importing_the_adapter_with_",
        "process-hook gc.callbacks: callback added",
    ),
    "import_side_effects_sets_trace": ("test_importing_the_adapter_with_", "process-hook sys.settrace:"),
    "import_side_effects_sets_profile": ("test_importing_the_adapter_with_", "process-hook sys.setprofile:"),
    "import_side_effects_sets_thread_trace": ("test_importing_the_adapter_with_", "process-hook threading.settrace:"),
    "import_side_effects_sets_excepthook": ("test_importing_the_adapter_with_", "process-hook sys.excepthook:"),
    "import_side_effects_patches_process_group": (
        "test_importing_the_adapter_with_",
        "class-attribute torch.distributed.distributed_c10d.ProcessGroup.allreduce: re-bound",
    ),
    "import_side_effects_patches_tensor": (
        "test_importing_the_adapter_with_",
        "class-attribute torch.Tensor.register_hook: re-bound",
    ),
    "import_side_effects_is_slow": (
        "test_adapter_import_time_is_small_next_to_megatron",
        "is slow next to megatron.core",
    ),
    "import_side_effects_install_one_name": (
        "test_install_rebinds_exactly_the_documented_names",
        "_allreduce_layernorm_grads",
    ),
    "import_side_effects_uninstall_keeps_alias": (
        "test_install_rebinds_exactly_the_documented_names",
        f"after uninstall() {FINALIZE}._allreduce_layernorm_grads is",
    ),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> SharedRuns:
    """Every seeded subject and the reference in one warm run."""
    subjects = [*(SEEDED / f"{seeded}.py" for seeded in SEEDED_BREAKS), REFERENCE_SUBJECT]
    return SharedRuns(
        [(SESSION, SELECTION, subject) for subject in subjects], lambda: tmp_path_factory.mktemp("runs"), first_red=True
    )


@pytest.mark.parametrize("seeded", sorted(SEEDED_BREAKS))
def test_seeded_subject_turns_the_family_red(seeded: str, runs: SharedRuns) -> None:
    run = runs.run(SESSION, SELECTION, SEEDED / f"{seeded}.py")
    case, named = SEEDED_BREAKS[seeded]
    failed = run.require_red(seeded)
    hits = [name for name, text in failed.items() if name.startswith(case) and named in text]
    assert hits, f"{seeded}: no failure of {case} names {named!r}; failed: {sorted(failed)}\n{run.output[-4000:]}"
    assert "contract import-side-effects | symbol ADAPTER_PACKAGE" in run.output


def test_reference_subject_is_green(runs: SharedRuns) -> None:
    run = runs.run(SESSION, SELECTION)
    assert run.returncode == 0 and not run.failed(), run.output[-3000:]
