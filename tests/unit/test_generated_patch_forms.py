"""``scan`` on frameworks hypothesis writes (:mod:`tests.patch_forms`): every layout, way of reaching Megatron, way
of assigning (a registry of dotted strings, a literal, a method bound on one built object whose class the source
names), time and guard, with or without a marker of the framework's own, against megatron-core 0.15.3's source.
Each framework makes exactly one patch of a real Megatron symbol, so the scan must report exactly that symbol, at the
line that makes it: no miss, and no extra (a framework's own class inside the ``megatron.`` namespace, patched beside
it, and its marker, a name no release defines, are never Megatron's)."""

from __future__ import annotations

import ast
import importlib
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from harness.source import package_layout
from harness.source.starter import scanned_replacements
from harness.targets.release_source import release_source
from tests.patch_forms import PatchForm, Target, patch_forms, write_framework

RELEASE = "0.15.3"


@pytest.fixture(scope="module")
def megatron_tree() -> Path:
    return release_source(RELEASE).root


def scanned(form: PatchForm, megatron: Path) -> tuple[set[tuple[str, str]], set[tuple[str, str]]]:
    """The (place, symbol) of every patch ``scan`` reports on ``form`` written to disk, and those expected."""
    with tempfile.TemporaryDirectory() as folder:
        written = write_framework(form, Path(folder))
        return scanned_replacements(written.root, [megatron]), written.rows(form.expected)


DRAWS = 1000
"""Frameworks written and scanned a run: at random on a laptop, derandomized under ``CI=true``."""


@settings(
    max_examples=DRAWS,
    derandomize=os.environ.get("CI", "").lower() == "true",
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(form=patch_forms())
def test_scan_finds_exactly_the_patch_each_generated_framework_makes(form: PatchForm, megatron_tree: Path) -> None:
    patches, expected = scanned(form, megatron_tree)
    assert patches == expected, form.describe()


NAMESPACE = PatchForm(
    "namespace",
    "import-top",
    "attribute",
    "apply",
    "none",
    Target(*"megatron.core.parallel_state _ _TENSOR_MODEL_PARALLEL_GROUP".split()),
)


def test_a_namespace_package_is_read_and_the_old_chain_rule_misses_it(
    megatron_tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seeded break: keeping only folders whose whole chain holds ``__init__.py`` (the rule before PEP 420 layouts
    were read) loses the patch of a namespace package."""
    form = PatchForm(
        "namespace",
        "from-inside",
        "attribute",
        "apply",
        "none",
        Target("megatron.core.tensor_parallel.random", "", "get_cuda_rng_tracker"),
    )
    assert scanned(form, megatron_tree)[0]
    original = package_layout._module_parts

    def regular_packages_only(relative: Path) -> list[str] | None:
        return None if relative.parts[0] == "fwns" else original(relative)

    monkeypatch.setattr(package_layout, "_module_parts", regular_packages_only)
    assert scanned(form, megatron_tree)[0] == set()


ROUTING = Target("megatron.core.transformer.moe.router", "TopKRouter", "routing")
STEP = Target("megatron.core.optimizer.optimizer", "ChainedOptimizer", "step", "[]")
RNG_TRACKER = Target("megatron.core.tensor_parallel.random", "", "get_cuda_rng_tracker")
"""A module's function: nothing but the module's reach places its patch (a class's method is also placed by the
class's name in the chain)."""


def _module_level_constants(trees: object) -> dict[str, str]:
    return {}


def _sets_by_setattr_only(loop: ast.For, name: str) -> bool:
    """The rule before loops that get an object by name were read: only ``setattr`` by the loop's name counts."""
    return any(
        isinstance(node, ast.Call)
        and getattr(node.func, "id", None) == "setattr"
        and len(node.args) >= 2
        and getattr(node.args[1], "id", None) == name
        for statement in loop.body
        for node in ast.walk(statement)
    )


@pytest.mark.parametrize(
    ("form", "module", "name", "broken"),
    [
        pytest.param(
            PatchForm("regular", "import-top", "setattr-dict-loop", "apply", "none", ROUTING),
            "harness.source.source_scan",
            "_literal_strings",
            lambda value, pairs=False: None,
            id="setattr-loop-over-a-literal-unread",
        ),
        pytest.param(
            PatchForm("regular", "import-top", "setattr-variable", "apply", "none", ROUTING),
            "harness.source.source_scan",
            "_string_constants",
            _module_level_constants,
            id="name-in-a-local-variable-unread",
        ),
        pytest.param(
            PatchForm("regular", "import-top", "registry", "import", "none", ROUTING),
            "harness.source.source_scan",
            "_registered",
            lambda dotted: False,
            id="registry-of-dotted-strings-unread",
        ),
        pytest.param(
            PatchForm("regular", "import-top", "attribute", "apply", "none", ROUTING, False, "closure", "constructed"),
            "harness.source.framework_patches:_Reader",
            "built_class",
            lambda self, value, scopes: None,
            id="object-built-by-its-class-unread",
        ),
        pytest.param(
            PatchForm("regular", "import-top", "attribute", "apply", "none", ROUTING, False, "get", "get-owner"),
            "harness.source.framework_patches",
            "class_bound_for",
            lambda value: None,
            id="class-named-by-get-unread",
        ),
        pytest.param(
            PatchForm("regular", "import-top", "helper", "apply", "none", ROUTING),
            "harness.source.source_scan",
            "_patching_helpers",
            lambda trees: {},
            id="helper-patching-its-parameters-unread",
        ),
        pytest.param(
            PatchForm("regular", "from-inside", "list-loop", "apply", "none", ROUTING),
            "harness.source.scoped_names:ScopedNames",
            "_elements",
            lambda self, iterable, where: [],
            id="loop-over-a-list-of-megatron-objects-unread",
        ),
        pytest.param(
            PatchForm("regular", "import-top", "getattr-loop", "apply", "none", ROUTING),
            "harness.source.source_scan",
            "_sets_by",
            _sets_by_setattr_only,
            id="class-got-by-a-loops-name-unread",
        ),
        pytest.param(
            PatchForm("regular", "import-top", "attribute", "apply", "none", STEP, False, "closure", "parameter"),
            "harness.source.scan_patches",
            "defining_classes",
            lambda instance, source: [],
            id="object-of-a-class-the-source-does-not-say-left-unsaid",
        ),
        pytest.param(
            PatchForm("regular", "import-top", "setattr-written-dict-loop", "apply", "none", ROUTING),
            "harness.source.source_scan",
            "_written_literals",
            lambda tree: {},
            id="setattr-loop-over-a-dict-the-file-binds-unread",
        ),
        pytest.param(
            PatchForm("regular", "sys-modules-get", "attribute", "apply", "none", RNG_TRACKER),
            "harness.source.scopes",
            "MODULE_GETTERS",
            frozenset({"import_module"}),
            id="module-got-by-sys-modules-get-unread",
        ),
        pytest.param(
            PatchForm("regular", "import-top", "attribute", "context", "none", ROUTING, undo=True),
            "harness.source.scan_patches",
            "_undos",
            lambda framework, source: {},
            id="line-putting-the-original-back-unlisted",
        ),
        pytest.param(
            PatchForm("regular", "import-top", "literal", "apply", "none", ROUTING, True),
            "harness.source.starter",
            "_state_set",
            lambda symbol, patches, trees: False,
            id="literal-on-a-megatron-name-taken-for-a-marker",
        ),
    ],
)
def test_each_form_goes_red_when_its_reading_is_taken_away(
    form: PatchForm, module: str, name: str, broken: object, megatron_tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seeded breaks: the property holds on the form, and fails once the reader's handling of it is replaced by the
    narrower rule it had before."""
    patches, expected = scanned(form, megatron_tree)
    assert patches == expected
    for each in module.split():
        owner, _, cls = each.partition(":")
        target = importlib.import_module(owner)
        monkeypatch.setattr(getattr(target, cls) if cls else target, name, broken)
    assert scanned(form, megatron_tree)[0] != expected
