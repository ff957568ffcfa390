"""Which names Megatron defines, read from megatron-core 0.15.3's source: the marker rule (a name no release defines
is the framework's own, and gets no replaced row) must not take Megatron's own members for markers. Each fact below
was read from that release: ``Router.set_layer_number`` (``transformer/moe/router.py:122``, inherited by
``TopKRouter``), ``self.output_layer`` set in ``GPTModel.__init__`` (``models/gpt/gpt_model.py:234``),
``linear_with_grad_accumulation_and_async_allreduce.warned`` set inside that module
(``tensor_parallel/layers.py:727``)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from harness.source import framework_scan, starter
from harness.source.framework_scan import defined
from harness.source.starter import scanned_replacements
from harness.targets.release_source import release_source

MEGATRONS = {
    "inherited from a Megatron base class": "megatron.core.transformer.moe.router:TopKRouter.set_layer_number",
    "set on self by the constructor": "megatron.core.models.gpt.gpt_model:GPTModel.output_layer",
    "set on a function in its module": (
        "megatron.core.tensor_parallel.layers:linear_with_grad_accumulation_and_async_allreduce.warned"
    ),
    "in the class body": "megatron.core.transformer.moe.router:TopKRouter.routing",
    "re-exported by a package": "megatron.core.tensor_parallel:ColumnParallelLinear.forward",
}
MARKERS = {
    "a flag a framework sets on a class": "megatron.core.transformer.moe.router:TopKRouter._fw_patched",
    "a method no release has": "megatron.core.models.gpt.gpt_model:GPTModel.prepare_inputs_for_generation",
    "a module function no release has": "megatron.core.parallel_state:get_context_parallel_group_for_send_recv_overlap",
}


@pytest.fixture(scope="module")
def megatron() -> Path:
    return release_source("0.15.3").root


@pytest.mark.parametrize("how", sorted(MEGATRONS))
def test_megatrons_own_members_are_defined(megatron: Path, how: str) -> None:
    assert defined(megatron, MEGATRONS[how])


def test_the_class_itself_lacks_what_only_its_objects_hold(megatron: Path) -> None:
    """The from-source verdicts ask what the class has (a property set on it in place of a constructor's
    attribute): ``self.output_layer`` is no member of ``GPTModel`` there."""
    assert not defined(megatron, MEGATRONS["set on self by the constructor"], on_objects=False)
    assert defined(megatron, MEGATRONS["inherited from a Megatron base class"], on_objects=False)


@pytest.mark.parametrize("how", sorted(MARKERS))
def test_a_name_no_release_has_is_not(megatron: Path, how: str) -> None:
    assert not defined(megatron, MARKERS[how])


def test_the_class_body_alone_takes_inherited_and_constructed_members_for_markers(
    megatron: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seeded break: a class's members read from its body only (the rule before)."""

    def body_only(tree: Path, module: str, cls: ast.ClassDef, name: str, depth: int, on_objects: bool) -> tuple | None:
        found = framework_scan._binding(cls.body, name)
        return (module, found) if found is not None else None

    monkeypatch.setattr(framework_scan, "_class_member", body_only)
    assert not defined(megatron, MEGATRONS["inherited from a Megatron base class"])
    assert not defined(megatron, MEGATRONS["set on self by the constructor"])


def test_a_member_a_base_outside_megatron_may_give_is_not_taken_for_the_frameworks_own(megatron: Path) -> None:
    """``MTPLossAutoScaler`` derives from ``torch.autograd.Function`` (``transformer/multi_token_prediction.py:356``):
    its ``apply`` is torch's, which Megatron's source never binds; a function the framework binds there replaces
    it. A name set on a module (``moe_module_specs.GroupedMLP``, which no release imports there) stays the
    framework's own."""
    apply = "megatron.core.transformer.multi_token_prediction:MTPLossAutoScaler.apply"
    assert not defined(megatron, apply) and framework_scan.inherits_from_outside(megatron, apply)
    assert not framework_scan.inherits_from_outside(megatron, "megatron.core.models.gpt.moe_module_specs:GroupedMLP")


def test_a_class_bound_on_a_name_no_release_defines_gets_no_replaced_row(
    megatron: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The marker rule for what the patch reader reads too (Primus binds ``GroupedMLP`` into ``moe_module_specs``,
    which never imports it). Seeded break: every read patch listed as replaced lists it."""
    (tmp_path / "fwnew").mkdir()
    (tmp_path / "fwnew" / "__init__.py").write_text("")
    (tmp_path / "fwnew" / "specs.py").write_text(
        "import megatron.core.models.gpt.moe_module_specs as specs\n\n\nclass Mine:\n    pass\n\n\n"
        "def apply():\n    specs.GroupedMLP = Mine\n"
    )
    assert scanned_replacements(tmp_path, [megatron]) == set()
    monkeypatch.setattr(starter, "replaceable", lambda key, trees: True)
    assert scanned_replacements(tmp_path, [megatron]) == {
        ("specs.py:9", "megatron.core.models.gpt.moe_module_specs:GroupedMLP")
    }
