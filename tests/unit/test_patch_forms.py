"""A framework's patch driven the way the framework applies it: budget units, an ``args`` namespace, a registry's
named patch undone by what apply returns, a context manager, a required budget, a framework function named by
``module:qualname``; each mistake one line naming its key. Megatron's ``finalize_model_grads`` is a stand-in module
here (what is checked is the driving, not Megatron); the same forms run against the real one in
``tests/e2e/test_framework_verdicts.py``."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path
from types import ModuleType

import pytest

from harness.formats.budget_units import budget_words, effective_budget, in_unit
from harness.install.framework_install import FrameworkInstall
from harness.subjects.declaration import DeclarationFileError, read_declaration_file
from harness.subjects.loading import load_subject
from harness.subjects.requirements import declared_install, merged
from harness.targets.megatron_names import FINALIZE_MODULE, UPSTREAM_NAME

PATCHES = """
import argparse
import contextlib
import importlib

SEEN = []


def _finalize():
    return importlib.import_module("megatron.core.distributed.finalize_model_grads")


def chunked(model, config, tp_group=None):
    return None


@contextlib.contextmanager
def chunked_grad_allreduce(bucket_mb):
    SEEN.append(("enter", bucket_mb))
    module = _finalize()
    before = module._allreduce_non_tensor_model_parallel_grads
    module._allreduce_non_tensor_model_parallel_grads = chunked
    try:
        yield
    finally:
        module._allreduce_non_tensor_model_parallel_grads = before
        SEEN.append(("exit", bucket_mb))


@contextlib.contextmanager
def refusing(bucket_mb):
    raise RuntimeError("unsupported megatron-core layout")
    yield


class Handle:
    def __init__(self, before):
        self.before = before

    def undo(self):
        _finalize()._allreduce_non_tensor_model_parallel_grads = self.before


def apply_patches(args, names=None):
    SEEN.append(("apply", names, getattr(args, "grad_chunk_bytes", None), getattr(args, "seed", None)))
    module = _finalize()
    handle = Handle(module._allreduce_non_tensor_model_parallel_grads)
    if "chunked_grad_allreduce" in (names or []):
        module._allreduce_non_tensor_model_parallel_grads = chunked
    return handle


def install(chunk_bytes):
    SEEN.append(("install", chunk_bytes))
    _finalize()._allreduce_non_tensor_model_parallel_grads = chunked


def uninstall():
    _finalize()._allreduce_non_tensor_model_parallel_grads = _UPSTREAM


_UPSTREAM = _finalize()._allreduce_non_tensor_model_parallel_grads
"""


def upstream(model, config, tp_group=None):
    """The stand-in of Megatron's function."""


@pytest.fixture
def megatron(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    finalize = ModuleType(FINALIZE_MODULE)
    setattr(finalize, UPSTREAM_NAME, upstream)
    monkeypatch.setitem(sys.modules, FINALIZE_MODULE, finalize)
    return finalize


@pytest.fixture
def framework(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    package = tmp_path / "forms" / "mcore"
    package.mkdir(parents=True)
    (tmp_path / "forms" / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "patches.py").write_text(PATCHES)
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [name for name in sys.modules if name == "forms" or name.startswith("forms.")]:
        monkeypatch.delitem(sys.modules, name)
    return tmp_path


def declare(framework: Path, patch: str, budget: str, name: str = "forms.toml") -> Path:
    text = f"""
    [subject]
    source_root = "."
    adapter_package = "forms.mcore"

    [patch]
    module = "forms.mcore.patches"
    {textwrap.dedent(patch).strip()}

    [budget]
    {textwrap.dedent(budget).strip()}
    """
    path = framework / name
    path.write_text(textwrap.dedent(text).replace("\n    ", "\n"))
    return path


def seen(subject: ModuleType) -> list:
    return sys.modules["forms.mcore.patches"].SEEN


def test_a_budget_in_mib_is_given_in_mib_and_a_context_manager_is_entered_and_left(
    framework: Path, megatron: ModuleType
) -> None:
    path = declare(
        framework, 'applied = "context"\ncontext = "chunked_grad_allreduce"', 'argument = "bucket_mb"\nunit = "MiB"'
    )
    subject = load_subject(str(path))
    assert getattr(megatron, UPSTREAM_NAME) is upstream, "the capture left Megatron patched"
    subject.install(budget_bytes=1 << 19)
    assert getattr(megatron, UPSTREAM_NAME) is not upstream
    subject.install(budget_bytes=3 << 20)
    subject.uninstall()
    assert getattr(megatron, UPSTREAM_NAME) is upstream, "one uninstall after two installs left the patch"
    assert seen(subject)[-4:] == [("enter", 0.5), ("exit", 0.5), ("enter", 3.0), ("exit", 3.0)]
    assert effective_budget(subject, 100) == 100 and budget_words(subject, 100) == "budget 100"


def test_whole_units_round_the_budget_up_and_the_cases_say_so(framework: Path, megatron: ModuleType) -> None:
    budget = 'argument = "bucket_mb"\nunit = "MiB"\nwhole_units = true'
    subject = load_subject(str(declare(framework, 'applied = "context"\ncontext = "chunked_grad_allreduce"', budget)))
    subject.install(budget_bytes=100)
    subject.uninstall()
    assert seen(subject)[-2:] == [("enter", 1), ("exit", 1)]
    assert effective_budget(subject, 100) == 1 << 20
    assert budget_words(subject, 100) == "budget 100 (given as 1 MiB: 1048576 bytes, rounded up)"
    assert in_unit(3 << 20, "MiB", True) == 3 and in_unit(1500, "KB", False) == 1.5


def test_a_context_manager_that_raises_is_one_line_naming_its_key(framework: Path, megatron: ModuleType) -> None:
    path = declare(framework, 'applied = "context"\ncontext = "refusing"', 'argument = "bucket_mb"\nunit = "MiB"')
    with pytest.raises(DeclarationFileError) as caught:
        load_subject(str(path))
    assert str(caught.value) == (
        f"{path}: key 'patch.context': refusing(...).__enter__() raised RuntimeError: unsupported megatron-core layout"
    )
    assert getattr(megatron, UPSTREAM_NAME) is upstream


def test_a_registrys_named_patch_from_an_args_namespace_is_undone_by_what_apply_returns(
    framework: Path, megatron: ModuleType
) -> None:
    patch = 'applied = "call"\napply = "apply_patches"\nundo = "returned"\n'
    patch += 'arguments = { names = ["chunked_grad_allreduce"], args = { seed = 7 } }'
    subject = load_subject(str(declare(framework, patch, 'argument = "args.grad_chunk_bytes"')))
    subject.install(budget_bytes=4096)
    assert getattr(megatron, UPSTREAM_NAME) is not upstream
    subject.uninstall()
    assert getattr(megatron, UPSTREAM_NAME) is upstream
    subject.install()  # the framework's own fallback: no attribute set
    subject.uninstall()
    assert seen(subject)[-2:] == [
        ("apply", ["chunked_grad_allreduce"], 4096, 7),
        ("apply", ["chunked_grad_allreduce"], None, 7),
    ]


def test_an_apply_that_requires_its_budget_is_given_one_at_capture(framework: Path, megatron: ModuleType) -> None:
    path = declare(framework, 'applied = "call"\napply = "install"\nundo = "uninstall"', 'argument = "chunk_bytes"')
    subject = load_subject(str(path))
    assert seen(subject)[0] == ("install", 1 << 30)
    assert subject.default_budget() == (None, "")


@pytest.mark.parametrize(
    ("budget", "key", "reason"),
    [
        ('argument = "bucket_mb"\nunit = "MiBs"', "budget.unit", "'MiBs' is not a unit: expected one of B, KB, KiB"),
        ('argument = "bucket_mb"\nwhole_units = true', "budget.whole_units", "goes with budget.unit"),
        ('argument = "args.a.b"', "budget.argument", "is not a keyword of apply, or keyword.attribute of one"),
    ],
)
def test_a_wrong_budget_form_is_one_line(framework: Path, budget: str, key: str, reason: str) -> None:
    path = declare(framework, 'applied = "context"\ncontext = "chunked_grad_allreduce"', budget)
    with pytest.raises(DeclarationFileError) as caught:
        read_declaration_file(path)
    assert f"key '{key}'" in str(caught.value) and reason in str(caught.value) and "\n" not in str(caught.value)


def test_a_missing_dependency_is_one_line_naming_the_module_and_the_key_that_installs_it(
    framework: Path, megatron: ModuleType
) -> None:
    patches = framework / "forms" / "mcore" / "patches.py"
    patches.write_text("import forms_missing_dependency_xyz\n" + patches.read_text())
    path = declare(framework, 'applied = "call"\napply = "install"\nundo = "uninstall"', 'argument = "chunk_bytes"')
    with pytest.raises(DeclarationFileError) as caught:
        load_subject(str(path))
    assert str(caught.value) == (
        f"{path}: key 'patch.module': importing 'forms.mcore.patches' needs module 'forms_missing_dependency_xyz', "
        'which this target\'s venv does not have: add what installs it to [subject] requirements ("." installs the '
        "framework as pip install . does, with its dependencies)"
    )


def test_replaces_with_names_the_frameworks_own_function(framework: Path) -> None:
    path = declare(framework, 'applied = "call"\napply = "install"', 'argument = "chunk_bytes"')
    symbol = f'"{FINALIZE_MODULE}:{UPSTREAM_NAME}"'
    path.write_text(
        path.read_text() + f'\n[megatron_symbols]\n{symbol} = "replaces with forms.mcore.patches:chunked"\n'
    )
    assert read_declaration_file(path).megatron_symbols
    path.write_text(path.read_text().replace("forms.mcore.patches:chunked", "chunked"))
    with pytest.raises(DeclarationFileError) as caught:
        read_declaration_file(path)
    assert "name the framework's own function as module:qualname" in str(caught.value)


def test_a_folder_requirement_is_installed_itself_and_a_distribution_is_the_framework(framework: Path) -> None:
    (framework / "pyproject.toml").write_text('[project]\nname = "forms"\ndynamic = ["dependencies"]\n')
    path = declare(framework, 'applied = "call"\napply = "install"', 'argument = "chunk_bytes"')
    path.write_text(
        path.read_text().replace(
            'adapter_package = "forms.mcore"',
            'adapter_package = "forms.mcore"\nrequirements = [".", "tomli-w"]\nleave_out = ["Flash_Attn"]',
        )
    )
    declaration = read_declaration_file(path)
    install = declared_install(declaration)
    assert declaration.installed
    assert install.requirements == ("tomli-w",)
    assert install.folders == (framework.resolve(),)
    assert install.frameworks == ("forms",) and install.leave_out == ("flash-attn",)
    published = FrameworkInstall(("verl==0.9.1",), frameworks=("verl==0.9.1",))
    assert merged([install, published, install]).requirements == ("tomli-w", "verl==0.9.1")


def test_an_apply_of_several_functions_runs_each_whatever_another_raises(framework: Path, megatron: ModuleType) -> None:
    (framework / "forms" / "mcore" / "several.py").write_text(
        "applied = []\n\n\ndef first():\n    applied.append('first')\n\n\n"
        "def second():\n    raise ImportError('needs transformer_engine')\n\n\n"
        "def third():\n    applied.append('third')\n"
    )
    path = declare(framework, 'applied = "call"\napply = "install"', 'argument = "chunk_bytes"')
    path.write_text(
        path.read_text()
        + '\n[symbols_patch]\nmodule = "forms.mcore.several"\n'
        + 'apply = ["first", "second", "forms.mcore.several:third"]\n'
    )
    subject = load_subject(str(path))
    subject.apply_replacements()
    assert sys.modules["forms.mcore.several"].applied == ["first", "third"]
    assert subject.SYMBOLS_PATCH.raised == ["second raised ImportError: needs transformer_engine"]
    assert subject.undo_replacements is None
