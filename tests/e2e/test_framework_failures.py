"""The framework's own code stopping before its patches on the target (megatron-core 0.15.3,
:mod:`tests.source_seeds`) is a row of its own, keyed ``!:<framework file>:<line>``: an apply reading an original
the release lacks is red naming Megatron's class; a module whose top-level import of Megatron fails, and a patching
function calling first what the release's class lacks, are advisories. Each replaced symbol is judged as the
framework's code reads: as written past a failing import, absent where the read of its own original fails or its
function never reaches it. The correct forms beside them make no such row.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.source.call_sites import MegatronSource
from tests.source_seeds import FORWARD, seeded_framework, seeded_release, verdicts

ROUTER = "megatron.core.transformer.moe.router:TopKRouter"
POSTPROCESS = "megatron.core.models.gpt.gpt_model:GPTModel._postprocess"

READ_SEED = """
from megatron.core.transformer.moe.router import TopKRouter

def apply():
    original = TopKRouter.{method}

    def replacement(self, *args, **kwargs):
        return original(self, *args, **kwargs)

    TopKRouter.{method} = replacement
"""
"""The read of the original is line 9, the patch line 14."""

FIRST_SEED = """
from megatron.core.models.gpt.gpt_model import GPTModel

def _postprocess(self, *args, **kwargs):
    return None

def apply(model: GPTModel):
    {before}
    GPTModel._postprocess = _postprocess
"""
"""The statement before the patch is line 12 (a guarded call's call on line 13)."""

SEEDS = {
    "an_original_the_release_lacks_read_before_the_patch": READ_SEED.format(method="_apply_expert_bias"),
    "an_original_the_release_has_read_before_the_patch": READ_SEED.format(method="routing"),
    "a_method_the_release_lacks_called_before_the_patch": FIRST_SEED.format(before="model.fuse_schedule_plan()"),
    "a_method_the_release_has_called_before_the_patch": FIRST_SEED.format(before="model.build_schedule_plan()"),
    "a_torch_module_method_called_before_the_patch": FIRST_SEED.format(before="model.train()"),
    "a_method_the_release_lacks_called_under_a_check": FIRST_SEED.format(
        before='if hasattr(model, "fuse_schedule_plan"):\n        model.fuse_schedule_plan()'
    ),
    "forwards_everything_in_a_module_importing_what_the_target_lacks": """
from megatron.core.models.hybrid.hybrid_block import HybridStack

def apply():
    original = MultiLatentAttention.forward

    def forward(self, *args, **kwargs):
        return original(self, *args, **kwargs)

    MultiLatentAttention.forward = forward
""",
}


@pytest.fixture(scope="module")
def megatron() -> MegatronSource:
    return seeded_release()


def write_framework(root: Path, seed: str) -> Path:
    return seeded_framework(root, seed, SEEDS[seed])


def failures(found: dict) -> dict:
    return {key: verdict for key, verdict in found.items() if key.startswith("!:")}


def test_an_apply_reading_an_original_the_release_lacks_is_a_red_row_naming_megatrons_class(
    tmp_path: Path, megatron: MegatronSource
) -> None:
    found = verdicts(write_framework(tmp_path, "an_original_the_release_lacks_read_before_the_patch"), megatron)
    row = found["!:seeded/patch.py:9"]
    assert row.verdict == "red", row.line()
    assert row.findings == [
        "seeded/patch.py:9 reads TopKRouter._apply_expert_bias before patching it, and megatron-core 0.15.3 defines "
        "none (its class at megatron/core/transformer/moe/router.py:127): the apply raises AttributeError here"
    ], row.findings
    symbol = found[f"{ROUTER}._apply_expert_bias"]
    assert symbol.verdict == "absent", symbol.line()
    assert "(`!:seeded/patch.py:9`)" in symbol.findings[0], symbol.findings


def test_an_apply_reading_an_original_the_release_has_makes_no_failure_row(
    tmp_path: Path, megatron: MegatronSource
) -> None:
    found = verdicts(write_framework(tmp_path, "an_original_the_release_has_read_before_the_patch"), megatron)
    assert failures(found) == {}, [v.line() for v in failures(found).values()]
    assert found[f"{ROUTER}.routing"].verdict not in ("red", "absent"), found[f"{ROUTER}.routing"].line()


def test_a_patch_in_a_module_whose_own_import_of_megatron_fails_is_judged_as_written_beside_an_advisory_row(
    tmp_path: Path, megatron: MegatronSource
) -> None:
    seed = "forwards_everything_in_a_module_importing_what_the_target_lacks"
    found = verdicts(write_framework(tmp_path, seed), megatron)
    row = found["!:seeded/patch.py:6"]
    assert row.verdict == "advisory", row.line()
    assert row.findings == [
        "seeded/patch.py:6 imports megatron.core.models.hybrid.hybrid_block.HybridStack, which megatron-core 0.15.3 "
        "lacks: importing seeded.patch raises ImportError here, and the module makes none of its patches "
        f"(`{FORWARD}`)"
    ], row.findings
    symbol = found[FORWARD]
    assert symbol.verdict == "fits", symbol.line()
    assert symbol.findings[-1].startswith("the patch is not made here: seeded/patch.py:6 imports"), symbol.findings
    assert symbol.line().endswith("(`!:seeded/patch.py:6`)"), symbol.line()


def test_a_patching_function_calling_first_what_the_releases_class_lacks_never_makes_its_patch(
    tmp_path: Path, megatron: MegatronSource
) -> None:
    found = verdicts(write_framework(tmp_path, "a_method_the_release_lacks_called_before_the_patch"), megatron)
    row = found["!:seeded/patch.py:12"]
    assert row.verdict == "advisory", row.line()
    assert row.findings == [
        "seeded/patch.py:12 calls model.fuse_schedule_plan on a GPTModel, and megatron-core 0.15.3's GPTModel has no "
        "fuse_schedule_plan (its class at megatron/core/models/gpt/gpt_model.py:39): apply raises AttributeError "
        f"there, and apply makes none of its patches (`{POSTPROCESS}`)"
    ], row.findings
    symbol = found[POSTPROCESS]
    assert symbol.verdict == "absent", symbol.line()
    assert symbol.findings[0].startswith("the patch is never made here: seeded/patch.py:12 calls"), symbol.findings


@pytest.mark.parametrize(
    "seed",
    [
        "a_method_the_release_has_called_before_the_patch",
        "a_torch_module_method_called_before_the_patch",
        "a_method_the_release_lacks_called_under_a_check",
    ],
)
def test_a_patching_function_whose_earlier_calls_go_through_is_judged_as_written(
    seed: str, tmp_path: Path, megatron: MegatronSource
) -> None:
    found = verdicts(write_framework(tmp_path, seed), megatron)
    assert failures(found) == {}, [v.line() for v in failures(found).values()]
    assert found[POSTPROCESS].verdict != "absent", found[POSTPROCESS].line()


OWN_NAMESPACE = {
    "megatron/fwbridge/__init__.py": "",
    "megatron/fwbridge/models.py": "class Qwen3VLGPTModel:\n    def _postprocess(self, x):\n        return x\n",
    "megatron/fwbridge/patch.py": """from megatron.core.transformer.moe.router import TopKRouter
from megatron.fwbridge.models import Qwen3VLGPTModel


def apply():
    original = Qwen3VLGPTModel._postprocess

    def replacement(self, *args, **kwargs):
        return original(self, *args, **kwargs)

    Qwen3VLGPTModel._postprocess = replacement
    TopKRouter.routing = replacement
""",
}
"""A framework living in the ``megatron.`` namespace (as Megatron-Bridge's ``megatron.bridge``) that patches a class
of its own, reading its original first, beside one patch of Megatron's."""


def _prefix_rule(dotted: str) -> bool:
    return dotted == "megatron" or dotted.startswith("megatron.")


def test_a_frameworks_own_class_in_the_megatron_namespace_is_never_megatrons(
    tmp_path: Path, megatron: MegatronSource, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its patch of its own class is no replaced symbol and its read of its own original no failure row; only the
    patch of Megatron's router is judged. Seeded break: taking every ``megatron.`` name for Megatron's (the rule
    before) makes the false red row of first contact ("reads Qwen3VLGPTModel._postprocess before patching it, and
    megatron-core 0.15.3 defines none")."""
    for name, text in OWN_NAMESPACE.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    found = verdicts(tmp_path, megatron)
    assert set(found) == {f"{ROUTER}.routing"}, sorted(found)
    for module in ("framework_patches", "framework_failures", "source_verdicts", "scoped_names", "object_classes"):
        monkeypatch.setattr(f"harness.source.{module}.is_megatron", _prefix_rule)
    broken = verdicts(tmp_path, megatron)
    assert any(key.startswith("!:") and row.verdict == "red" for key, row in broken.items()), sorted(broken)
