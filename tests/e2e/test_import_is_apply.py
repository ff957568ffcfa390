"""A framework whose import is its apply, as ms-swift's ``swift.megatron`` runs ``init_megatron_env()`` from its
``__init__``: the harness imports it to find its declared functions and puts Megatron (and torch) back, so every case
starts from Megatron's own objects. Its import is red naming what it re-binds, from Megatron's original to the
framework's (never "the framework's -> the framework's"), loading the subject is green, the declared apply is checked
over Megatron's own objects, and its import observed beside the fakes (real torch, whose function it re-binds, and a
fake ``megatron.core`` carrying the real ``__version__`` it checks) leaves nothing to the next case. The same framework
with an ``__init__`` that applies nothing is green.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.pytest_helpers import run_target_cases

SESSION = "megatron-0.15"
P2P = "megatron.core.pipeline_parallel.p2p_communication"
PLANNER = "torch.distributed.checkpoint.default_planner"
CASES = ["cases/test_import_side_effects.py", "cases/test_api_fingerprint.py"]

PATCH = f'''"""What ms-swift's init_megatron_env patches, in small: a Megatron module function, a torch one."""

import megatron.core

from {P2P.rpartition(".")[0]} import p2p_communication
from torch.distributed.checkpoint import default_planner


def _batched_p2p_ops(*, tensor_send_prev, tensor_recv_prev, tensor_send_next, tensor_recv_next, group, **kwargs):
    return []


def _validate_global_plan(global_plan, metadata):
    return True


def apply():
    p2p_communication._batched_p2p_ops = _batched_p2p_ops
    if megatron.core.__version__:  # the version check frameworks make at import, passed beside the fakes too
        default_planner._validate_global_plan = _validate_global_plan
'''


def framework(root: Path, applies_at_import: bool) -> Path:
    package = root / "bootfw"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("from .patch import apply\n\napply()\n" if applies_at_import else "")
    (package / "patch.py").write_text(PATCH)
    declaration = root / "megatron-conformance.toml"
    declaration.write_text(
        '[subject]\nsource_root = "."\nadapter_package = "bootfw"\n\n'
        '[symbols_patch]\nmodule = "bootfw.patch"\napply = "apply"\n\n'
        "[megatron_symbols]\n"
        f'"{P2P}:_batched_p2p_ops" = "replaces with bootfw.patch:_batched_p2p_ops"\n'
    )
    return declaration


@pytest.mark.parametrize("applies_at_import", [True, False])
def test_an_import_that_applies_is_red_from_megatrons_own_objects(tmp_path: Path, applies_at_import: bool) -> None:
    declaration = framework(tmp_path / "fw", applies_at_import)
    run = run_target_cases(SESSION, CASES, tmp_path / "run", declaration)
    verdicts = {name: verdict for name, (verdict, _) in run.verdicts.items()}
    assert "error" not in verdicts.values() and "ERROR at" not in run.output, run.output[-4000:]
    assert verdicts["test_loading_the_subject_changes_nothing"] == "passed", run.output[-4000:]
    assert verdicts["test_the_patch_binds_each_replacement_and_undo_restores_exactly"] == "passed", run.output[-4000:]
    red = {
        "test_importing_the_adapter_with_real_megatron_changes_nothing",
        "test_importing_the_adapter_as_the_framework_does_changes_nothing",
        "test_importing_the_adapter_with_only_fakes_changes_nothing",
    }
    if not applies_at_import:
        assert run.returncode == 0 and {verdicts[name] for name in red} == {"passed"}, run.output[-4000:]
        return
    failed = run.require_red("a framework whose import applies its patches")
    assert set(failed) == red, run.output[-4000:]
    for name in red - {"test_importing_the_adapter_with_only_fakes_changes_nothing"}:
        assert (
            f"{P2P}._batched_p2p_ops: re-bound: <function {P2P}._batched_p2p_ops> -> "
            "<function bootfw.patch._batched_p2p_ops>" in failed[name]
        ), failed[name]
    for text in failed.values():
        assert (
            f"{PLANNER}._validate_global_plan: re-bound: <function {PLANNER}._validate_global_plan> -> "
            "<function bootfw.patch._validate_global_plan>" in text
        ), text


IMPORT_APPLIED = f'''"""Applies at import, as a module body that patches: each import makes its replacement anew."""

from {P2P.rpartition(".")[0]} import p2p_communication


def _batched_p2p_ops(*, tensor_send_prev, tensor_recv_prev, tensor_send_next, tensor_recv_next, group, **kwargs):
    return []


p2p_communication._batched_p2p_ops = _batched_p2p_ops
'''


def test_an_import_applied_patch_is_checked_against_itself_as_green(tmp_path: Path) -> None:
    """Declared ``applied = "import"`` with a bare ``replaces``: the replacement captured from one import and the one
    the checked import binds are two function objects of the same module, qualname and code, the same replacement.
    (Compared by id they differ: ``tests/unit/test_patch_identity.py`` seeds that break.)"""
    root = tmp_path / "fw"
    (root / "importfw").mkdir(parents=True)
    (root / "importfw" / "__init__.py").write_text("")
    (root / "importfw" / "patch.py").write_text(IMPORT_APPLIED)
    declaration = root / "megatron-conformance.toml"
    declaration.write_text(
        '[subject]\nsource_root = "."\nadapter_package = "importfw"\n\n'
        '[symbols_patch]\nmodule = "importfw.patch"\napplied = "import"\n\n'
        f'[megatron_symbols]\n"{P2P}:_batched_p2p_ops" = "replaces"\n'
    )
    run = run_target_cases(SESSION, ["cases/test_api_fingerprint.py"], tmp_path / "run", declaration)
    verdicts = {name: verdict for name, (verdict, _) in run.verdicts.items()}
    assert verdicts["test_the_patch_binds_each_replacement_and_undo_restores_exactly"] == "passed", run.output[-4000:]
