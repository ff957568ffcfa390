"""Patches of Megatron whose module or class the source does not name on the target (megatron-core 0.15.3,
:mod:`tests.source_seeds`) each get a verdict, keyed ``?:...``: a method bound on built objects no class of the
release defines, or of a class the framework tests for that the release lacks, is absent; one several classes define
with nothing saying which is undecided, never left out or called a fit, until declared; a back-fill through
``sys.modules`` that reaches no Megatron module here is absent, and one in a module that never imports Megatron is
another library's. A declared ``replaces with`` places such a patch (through the framework's re-exports too); one
naming no function of the framework is red, naming the entry.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.source.call_sites import MegatronSource
from harness.source.from_source import versions_of
from harness.source.source_verdicts import framework_verdicts
from tests.source_seeds import BACKFILL_SEED, RELEASE, seeded_framework, seeded_release, verdicts

ROUTER = "megatron.core.transformer.moe.router:TopKRouter"

BOUND_SEED = """
{imports}

def {function}(self, *args, **kwargs):
    return args[0], args[0]

def apply(module):
    {test}
    module.{method} = {function}.__get__(module)
"""
HYBRID = "megatron.core.models.hybrid.hybrid_block"
SEEDS = {
    "forward_bound_on_objects_nothing_names": BOUND_SEED.format(
        imports="", function="wrapped", test="pass", method="forward"
    ),
    "forward_bound_on_routers": BOUND_SEED.format(
        imports="from megatron.core.transformer.moe.router import TopKRouter",
        function="wrapped",
        test="assert isinstance(module, TopKRouter)",
        method="forward",
    ),
    "forward_bound_on_objects_of_a_class_the_release_lacks": BOUND_SEED.format(
        imports=f"try:\n    from {HYBRID} import HybridStack\nexcept ImportError:\n    HybridStack = None",
        function="wrapped",
        test="assert isinstance(module, HybridStack)",
        method="forward",
    ),
    "a_method_no_class_defines_bound_on_objects": BOUND_SEED.format(
        imports="", function="wrapped", test="pass", method="fused_schedule_step"
    ),
    "a_name_no_module_holds_back_filled": BACKFILL_SEED.format(parameters="x", name="fused_schedule_kernel"),
    "a_name_a_module_holds_back_filled": BACKFILL_SEED.format(parameters="x", name="apply_rotary_emb_flash"),
}


@pytest.fixture(scope="module")
def megatron() -> MegatronSource:
    return seeded_release()


def write_framework(root: Path, seed: str) -> Path:
    return seeded_framework(root, seed, SEEDS[seed])


def test_a_method_bound_on_objects_several_classes_could_be_is_undecided_not_left_out(
    tmp_path: Path, megatron: MegatronSource
) -> None:
    found = verdicts(write_framework(tmp_path, "forward_bound_on_objects_nothing_names"), megatron)
    verdict = found["?:module.forward@seeded/patch.py:13"]
    assert verdict.verdict == "undecided", verdict.line()
    assert verdict.findings[0].endswith(
        "and the source does not say which `module` is: declare the symbol in [megatron_symbols] as "
        "'replaces with seeded.patch:wrapped'"
    ), verdict.findings
    assert verdict.patched_at == ["seeded/patch.py:13"], verdict.patched_at


def test_a_method_bound_on_objects_of_a_class_the_framework_tests_for_is_judged_under_that_class(
    tmp_path: Path, megatron: MegatronSource
) -> None:
    found = verdicts(write_framework(tmp_path, "forward_bound_on_routers"), megatron)
    assert not [symbol for symbol in found if symbol.startswith("?:")], sorted(found)
    assert found[f"{ROUTER}.forward@seeded/patch.py:13"].verdict == "fits", sorted(found)


def test_a_declared_replacement_places_what_the_source_cannot(tmp_path: Path, megatron: MegatronSource) -> None:
    root = write_framework(tmp_path, "forward_bound_on_objects_nothing_names")
    versions = versions_of(megatron, RELEASE, "2.13.0")
    declared = {f"{ROUTER}.forward": "seeded.patch:wrapped"}
    found = {v.symbol: v for v in framework_verdicts(root, megatron, versions, declared)}
    assert not [symbol for symbol in found if symbol.startswith("?:")], sorted(found)
    assert found[f"{ROUTER}.forward"].verdict == "fits", found[f"{ROUTER}.forward"].line()


def test_a_declared_function_of_the_same_name_in_another_module_does_not_place_it(
    tmp_path: Path, megatron: MegatronSource
) -> None:
    root = write_framework(tmp_path, "forward_bound_on_objects_nothing_names")
    (root / "seeded" / "other.py").write_text("def wrapped(self, *args, **kwargs):\n    return args[0], args[0]\n")
    versions = versions_of(megatron, RELEASE, "2.13.0")
    declared = {f"{ROUTER}.forward": "seeded.other:wrapped"}
    found = {v.symbol: v for v in framework_verdicts(root, megatron, versions, declared)}
    assert found["?:module.forward@seeded/patch.py:13"].verdict == "undecided", sorted(found)


def test_a_declared_replacement_reached_through_a_re_export_places_it(tmp_path: Path, megatron: MegatronSource) -> None:
    root = write_framework(tmp_path, "forward_bound_on_objects_nothing_names")
    (root / "seeded" / "__init__.py").write_text("from .patch import wrapped\n")
    versions = versions_of(megatron, RELEASE, "2.13.0")
    declared = {f"{ROUTER}.forward": "seeded:wrapped"}
    found = {v.symbol: v for v in framework_verdicts(root, megatron, versions, declared)}
    assert found[f"{ROUTER}.forward"].verdict == "fits", found[f"{ROUTER}.forward"].line()


@pytest.mark.parametrize(
    ("replacement", "why"),
    [
        ("seeded.nothere:wrapped", "the framework has no module seeded.nothere"),
        ("seeded.patch:unwrapped", "seeded.patch defines no unwrapped"),
    ],
)
def test_a_declared_replacement_the_framework_does_not_define_is_red_naming_the_entry(
    replacement: str, why: str, tmp_path: Path, megatron: MegatronSource
) -> None:
    root = write_framework(tmp_path, "forward_bound_on_objects_nothing_names")
    versions = versions_of(megatron, RELEASE, "2.13.0")
    found = {v.symbol: v for v in framework_verdicts(root, megatron, versions, {f"{ROUTER}.forward": replacement})}
    verdict = found[f"{ROUTER}.forward"]
    assert verdict.verdict == "red", verdict.line()
    assert verdict.findings == [
        f"declared in [megatron_symbols] as 'replaces with {replacement}', but {why} (read under {root}): the entry "
        "names no function of the framework to check; correct it"
    ], verdict.findings


@pytest.mark.parametrize(
    ("seed", "finding"),
    [
        (
            "forward_bound_on_objects_of_a_class_the_release_lacks",
            "the objects `module` are tested as HybridStack, which megatron-core 0.15.3 lacks",
        ),
        (
            "a_method_no_class_defines_bound_on_objects",
            "no class of megatron-core 0.15.3 defines or sets `fused_schedule_step`: the patch adds a name Megatron "
            "does not call",
        ),
    ],
)
def test_a_method_bound_on_objects_no_class_of_the_release_has_is_absent(
    seed: str, finding: str, tmp_path: Path, megatron: MegatronSource
) -> None:
    found = verdicts(write_framework(tmp_path, seed), megatron)
    unplaced = {symbol: v for symbol, v in found.items() if symbol.startswith("?:")}
    assert [v.verdict for v in unplaced.values()] == ["absent"], sorted(found)
    assert next(iter(unplaced.values())).findings == [finding]


def test_a_back_fill_that_reaches_no_megatron_module_is_absent(tmp_path: Path, megatron: MegatronSource) -> None:
    verdict = verdicts(write_framework(tmp_path, "a_name_no_module_holds_back_filled"), megatron)[
        "?:fused_schedule_kernel"
    ]
    assert verdict.verdict == "absent", verdict.line()
    assert verdict.findings == [
        "no module of megatron-core 0.15.3 binds `fused_schedule_kernel` at its top level to None: the back-fill "
        "changes nothing of Megatron's here"
    ], verdict.findings
    assert verdict.patched_at == ["seeded/patch.py:15"], verdict.patched_at


def test_a_back_fill_that_reaches_a_megatron_module_is_filed_under_it(tmp_path: Path, megatron: MegatronSource) -> None:
    found = verdicts(write_framework(tmp_path, "a_name_a_module_holds_back_filled"), megatron)
    assert "megatron.core.models.common.embeddings.rope_utils:apply_rotary_emb_flash" in found, sorted(found)
    assert not [symbol for symbol in found if symbol.startswith("?:")], sorted(found)


def test_a_back_fill_in_a_module_that_never_imports_megatron_is_another_librarys(
    tmp_path: Path, megatron: MegatronSource
) -> None:
    root = write_framework(tmp_path, "a_name_no_module_holds_back_filled")
    (root / "seeded" / "patch.py").write_text(SEEDS["a_name_no_module_holds_back_filled"])
    assert verdicts(root, megatron) == {}
