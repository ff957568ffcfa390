"""A framework's patches read from its source alone: which assignments are patches of Megatron (names resolved in
the scopes they are made in), what replaces, and which of its own checks skip a patch on a target. Frameworks are
written here as small packages; Megatron's side is a stand-in answer of which dotted names exist (the checks against
real Megatron source are in ``tests/e2e/test_source_verdicts.py``)."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

from harness.plugin.blockers import cuda_only_module, subject_blocker
from harness.source.framework_guards import Versions, guard_of, release
from harness.source.framework_patches import SourcePatch, read_framework
from harness.source.replacement_fit import ReadFunction

MEGATRON = {"megatron.core.transformer.moe.router", "megatron.core.transformer.moe.router.TopKRouter"}


def owner(dotted: str) -> bool:
    return dotted in MEGATRON


def framework(tmp_path: Path, **modules: str) -> Path:
    package = tmp_path / "fw"
    package.mkdir()
    (package / "__init__.py").write_text("")
    for name, text in modules.items():
        (package / f"{name}.py").write_text(textwrap.dedent(text))
    return tmp_path


def patches(root: Path) -> list[SourcePatch]:
    return read_framework(root, owner).patches


def test_a_patch_made_through_a_lazy_import_is_found_with_its_replacement_and_the_original_it_read(
    tmp_path: Path,
) -> None:
    root = framework(
        tmp_path,
        patch="""
        def apply():
            from megatron.core.transformer.moe.router import TopKRouter
            original = TopKRouter.routing

            def routing(self, logits, **kwargs):
                return original(self, logits, **kwargs)

            TopKRouter.routing = routing

        def undo(saved):
            from megatron.core.transformer.moe import router
            router.TopKRouter.routing = saved
            router.TopKRouter._patched = True
        """,
    )
    found = patches(root)
    made = [p for p in found if p.definition is not None]
    assert [(p.path, p.definition.node.name) for p in made] == [
        ("megatron.core.transformer.moe.router.TopKRouter.routing", "routing")
    ]
    assert made[0].originals == {"original": "megatron.core.transformer.moe.router.TopKRouter.routing"}
    assert {p.place for p in found if p.constant} == {"fw/patch.py:14"}
    assert [p.value for p in found if p.definition is None and not p.constant] == ["saved"]


def test_an_attribute_chain_on_something_else_is_no_patch(tmp_path: Path) -> None:
    """A name bound to Megatron in one function is not Megatron in another (``state`` is a local there)."""
    root = framework(
        tmp_path,
        other="""
        from megatron.core import optimizer as state

        def keep(state, v):
            state.loss.images = v

        def patch(f):
            state.something = f
        """,
    )
    assert patches(root) == []


def test_setattr_over_a_literal_tuple_patches_each_name(tmp_path: Path) -> None:
    root = framework(
        tmp_path,
        loop="""
        import importlib

        def apply(helper):
            router = importlib.import_module("megatron.core.transformer.moe.router")
            for name in ("a_helper", "b_helper"):
                setattr(router, name, helper)
        """,
    )
    assert sorted(p.path for p in patches(root)) == [
        "megatron.core.transformer.moe.router.a_helper",
        "megatron.core.transformer.moe.router.b_helper",
    ]


def test_a_bound_method_set_on_a_module_loses_its_first_parameter(tmp_path: Path) -> None:
    root = framework(
        tmp_path,
        trainer="""
        from megatron.core.transformer.moe import router

        class Trainer:
            def _routing(self, logits, k):
                return logits

            def patch(self):
                router.helper = self._routing
        """,
    )
    (patch,) = patches(root)
    assert patch.bound and str(ReadFunction(patch.definition.node, patch.bound).signature()) == "(logits, k)"


def guard(source: str, megatron: str = "0.16.1", defined: frozenset[str] = frozenset()) -> tuple[bool, str | None]:
    """Whether the assignment ``X.y = z`` marked ``# patch`` in ``source`` runs on a target of ``megatron``."""
    tree = ast.parse(textwrap.dedent(source))
    functions = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]
    chain: tuple[ast.AST, ...] = ()
    for function in functions or [None]:
        body = function.body if function else tree.body
        for node in ast.walk(ast.Module(body=body, type_ignores=[])):
            if isinstance(node, ast.Assign) and ast.unparse(node).endswith("= z"):
                chain = ((function,) if function else ()) + (node,)
    names = {"megatron": "megatron", "version": "packaging.version", "is_npu": "fw.device.is_npu_available"}
    versions = Versions(megatron, "2.13.0", lambda dotted: dotted in defined)
    found = guard_of(chain, tree.body, lambda node: f"line {node.lineno}", names, versions)
    return found.applied, found.place


CHECKS = {
    "below 0.16.2": (
        'def f():\n    if version.parse(megatron.core.__version__) < version.parse("0.16.2"):\n        X.y = z'
    ),
    "a flag from 0.16.0rc0": (
        "def f():\n    ge = version.parse(megatron.core.__version__) >= version.parse('0.16.0rc0')\n"
        "    if ge:\n        X.y = z\n    else:\n        X.y = w"
    ),
    "return unless 0.12.1": 'def f():\n    if megatron.core.__version__ != "0.12.1":\n        return\n    X.y = z',
    "on NPUs": "def f():\n    if is_npu:\n        X.y = z",
    "where an import fails": (
        "def f():\n    try:\n        from megatron.core.a import b\n    except ImportError:\n        X.y = z"
    ),
    "an unreadable check": "def f():\n    if unknown():\n        X.y = z",
    "a helper of the module comparing the version": (
        "def old():\n    return version.parse(megatron.core.__version__) < version.parse('0.16')\n"
        "def f():\n    if old():\n        X.y = z"
    ),
    "a helper of the module it cannot read": (
        "def old():\n    return unknown()\ndef f():\n    if old():\n        X.y = z"
    ),
}


@pytest.mark.parametrize(
    ("check", "megatron", "expected"),
    [
        ("below 0.16.2", "0.16.1", (True, None)),
        ("below 0.16.2", "0.17.1", (False, "line 2")),
        ("a flag from 0.16.0rc0", "0.15.3", (False, "line 3")),
        ("return unless 0.12.1", "0.15.3", (False, "line 2")),
        ("on NPUs", "0.16.1", (False, "line 2")),
        ("where an import fails", "0.16.1", (False, "line 2")),
        ("an unreadable check", "0.16.1", (True, "line 2")),
        ("a helper of the module comparing the version", "0.15.3", (True, None)),
        ("a helper of the module comparing the version", "0.16.1", (False, "line 4")),
        ("a helper of the module it cannot read", "0.15.3", (True, "line 4")),
    ],
)
def test_the_frameworks_own_checks_are_read_against_the_target(
    check: str, megatron: str, expected: tuple[bool, str | None]
) -> None:
    assert guard(CHECKS[check], megatron, frozenset({"megatron.core.a.b"})) == expected


SUBCLASS_IF_IMPORTED = """\
try:
    from megatron.core.a import b
    HAVE_B = True
except ImportError:
    b = None
    HAVE_B = False

if HAVE_B:
    class Sub(b):
        pass
else:
    Sub = None

def f():
    if unknown() or Sub is None:
        return
    X.y = z
"""


@pytest.mark.parametrize(
    ("defined", "expected"), [(frozenset(), (False, "line 15")), (frozenset({"megatron.core.a.b"}), (True, "line 15"))]
)
def test_a_class_defined_only_where_its_import_goes_through_is_read_through_the_imports_flag(
    defined: frozenset[str], expected: tuple[bool, str | None]
) -> None:
    """mcore-bridge's ``__class__`` swap: ``Sub`` exists only under a flag its ``try`` of imports sets, and the swap
    returns early where it is None; where the import fails the swap is not made, where it goes through the check
    left unread (``unknown()``) takes it as made."""
    assert guard(SUBCLASS_IF_IMPORTED, "0.16.1", defined) == expected


def test_release_numbers_compare_as_versions() -> None:
    assert release("0.16.0rc0") == (0, 16) < release("0.16.1") and release("2.13.0+cpu") == (2, 13)


def test_a_subject_that_needs_a_cuda_only_module_is_skipped_not_red() -> None:
    line = "importing 'fw' needs module 'transformer_engine', which this target's venv does not have"
    assert cuda_only_module(line) == "transformer_engine"
    assert cuda_only_module("cannot import name 'TEGroupedLinear' from 'megatron.core.extensions.transformer_engine'")
    assert cuda_only_module("No module named 'peft'") is None
    assert subject_blocker(line).machine_bound and not subject_blocker("No module named 'peft'").machine_bound


LORA = """
from contextlib import contextmanager

from megatron.core.transformer.moe.router import TopKRouter


class LoraLayer:
    @contextmanager
    def _patch_gating(self):
        origin = self.base_layer.__class__.gating

        def gating(_self, x):
            return origin(_self, x)

        self.base_layer.__class__.gating = gating
        try:
            yield
        finally:
            self.base_layer.__class__.gating = origin

    def forward(self, x):
        if isinstance(self.other, int):
            return x
        elif isinstance(self.base_layer, TopKRouter):
            with self._patch_gating():
                return self.base_layer(x)
        return self.base_layer(x)
"""


def test_the_class_a_patching_method_binds_on_is_read_from_where_its_callers_test_the_object(tmp_path: Path) -> None:
    """``self.base_layer.__class__.gating = ...`` in a method its class enters only under ``isinstance(self.base_layer,
    TopKRouter)``: the objects are TopKRouters (mcore-bridge's LoRA router patch)."""
    [instance] = read_framework(framework(tmp_path, lora=LORA), owner).instances
    assert instance.method == "gating" and instance.classes == ("megatron.core.transformer.moe.router.TopKRouter",)


def test_a_caller_that_tests_another_object_says_nothing_of_the_patched_ones(tmp_path: Path) -> None:
    unguarded = LORA.replace("isinstance(self.base_layer, TopKRouter)", "isinstance(self.other, TopKRouter)")
    [instance] = read_framework(framework(tmp_path, lora=unguarded), owner).instances
    assert instance.classes == ()
