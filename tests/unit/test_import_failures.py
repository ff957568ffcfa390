"""A framework module that exists but whose import raises (a dependency broken by what was installed beside it, as
``transformers`` raising ``operator torchvision::nms does not exist`` against another torch): the line names the
module, the chain of imports down to the raise with each file and line, and the error as Python raised it; "no
module" stays for a module that is not there."""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType

import pytest

from harness.subjects import framework_imports, symbols_patch
from harness.subjects.declaration import DeclarationFileError
from harness.subjects.loading import load_subject
from tests.unit.test_patch_forms import declare, framework, megatron  # noqa: F401  (fixtures)

BROKEN = "forms_broken_vision_xyz"


def break_a_dependency(root: Path) -> Path:
    """``forms/mcore/patches.py`` imports a dependency whose own import raises at its line 2."""
    (root / f"{BROKEN}.py").write_text('NMS = None\nraise RuntimeError("operator torchvision::nms does not exist")\n')
    patches = root / "forms" / "mcore" / "patches.py"
    patches.write_text(f"import {BROKEN}\n" + patches.read_text())
    sys.modules.pop(BROKEN, None)
    return patches


def test_a_raising_dependency_is_named_with_the_chain_that_reached_it(
    framework: Path,  # noqa: F811
    megatron: ModuleType,  # noqa: F811
) -> None:
    patches = break_a_dependency(framework)
    path = declare(framework, 'applied = "call"\napply = "install"\nundo = "uninstall"', 'argument = "chunk_bytes"')
    with pytest.raises(DeclarationFileError) as caught:
        load_subject(str(path))
    said = str(caught.value)
    assert said.startswith(
        f"{path}: key 'patch.module': importing 'forms.mcore.patches' raised RuntimeError: "
        "operator torchvision::nms does not exist, through "
    ), said
    assert said.endswith(f"{patches}:1 -> {framework / BROKEN}.py:2") and "\n" not in said, said


def test_a_package_above_the_patch_module_that_raises_is_not_no_module(
    framework: Path,  # noqa: F811
    megatron: ModuleType,  # noqa: F811
) -> None:
    """``[symbols_patch] module`` is looked up before it is imported; its package raising there is the package's
    error, not a missing module."""
    (framework / "forms" / "__init__.py").write_text(f"import {BROKEN}\n")
    break_a_dependency(framework)
    path = declare(framework, 'applied = "call"\napply = "install"\nundo = "uninstall"', 'argument = "chunk_bytes"')
    path.write_text(path.read_text() + '\n[symbols_patch]\nmodule = "forms.mcore.patches"\napply = "install"\n')
    with pytest.raises(DeclarationFileError) as caught:
        load_subject(str(path))
    said = str(caught.value)
    assert "no module" not in said and "raised RuntimeError: operator torchvision::nms does not exist" in said, said
    assert f"{framework / 'forms' / '__init__.py'}:1 -> {framework / BROKEN}.py:2" in said, said


def test_a_module_that_is_not_there_is_still_no_module(
    framework: Path,  # noqa: F811
    megatron: ModuleType,  # noqa: F811
) -> None:
    """The correct variant: nothing raised, the module is absent."""
    path = declare(framework, 'applied = "call"\napply = "install"\nundo = "uninstall"', 'argument = "chunk_bytes"')
    path.write_text(path.read_text().replace('module = "forms.mcore.patches"', 'module = "forms.mcore.absent"'))
    with pytest.raises(DeclarationFileError) as caught:
        load_subject(str(path))
    assert "no module 'forms.mcore.absent'" in str(caught.value), str(caught.value)


def test_without_the_chain_the_line_no_longer_says_where(
    framework: Path,  # noqa: F811
    megatron: ModuleType,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Seeded break: the line as it was (the error, no chain) loses which file raised."""
    monkeypatch.setattr(framework_imports, "import_failure", lambda module, err: f"importing {module!r} failed: {err}")
    monkeypatch.setattr(symbols_patch, "import_failure", lambda module, err: f"importing {module!r} failed: {err}")
    break_a_dependency(framework)
    path = declare(framework, 'applied = "call"\napply = "install"\nundo = "uninstall"', 'argument = "chunk_bytes"')
    with pytest.raises(DeclarationFileError) as caught:
        load_subject(str(path))
    assert f"{BROKEN}.py:2" not in str(caught.value)
