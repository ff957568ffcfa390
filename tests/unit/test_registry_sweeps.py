"""A registry of dotted strings whose generic apply sweeps ``sys.modules`` by identity (MindSpeed's
``patch_utils``): a record naming a function through a package that re-exports it replaces it in the package, and
the sweep re-binds it where it is defined and wherever it is held by value. Megatron-core 0.15.3 defines ``save`` in
``dist_checkpointing/serialization.py``, and ``dist_checkpointing/__init__.py`` alone imports it by value."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.source import framework_scan
from harness.source.starter import scanned_replacements
from harness.targets.release_source import release_source

RELEASE = "0.15.3"
REGISTRY = """import importlib
import sys

RECORDS = []


def register_patch(path, value):
    RECORDS.append((path, value))


def save_wrapper(fn):
    return fn


def apply_patches():
    for path, value in RECORDS:
        module_name, _, name = path.rpartition(".")
        module = importlib.import_module(module_name)
        original = getattr(module, name)
        setattr(module, name, value)
        {sweep}


def register():
    register_patch("megatron.core.dist_checkpointing.save", save_wrapper)  # the record
"""
SWEEP = """for _, held in sys.modules.copy().items():
            if getattr(held, name, None) is original:
                setattr(held, name, value)"""


@pytest.fixture(scope="module")
def megatron() -> Path:
    return release_source(RELEASE).root


def scanned(tmp_path: Path, megatron: Path, sweep: str) -> tuple[set[tuple[str, str]], str]:
    package = tmp_path / "fwreg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    text = REGISTRY.format(sweep=sweep)
    (package / "patches.py").write_text(text)
    line = next(i for i, each in enumerate(text.splitlines(), 1) if "# the record" in each)
    return scanned_replacements(tmp_path, [megatron]), f"patches.py:{line}"


def test_a_swept_registry_record_replaces_the_function_where_it_is_defined(tmp_path: Path, megatron: Path) -> None:
    found, place = scanned(tmp_path, megatron, SWEEP)
    assert found == {
        (place, "megatron.core.dist_checkpointing:save"),
        (place, "megatron.core.dist_checkpointing.serialization:save"),
    }


def test_without_a_sweep_the_record_replaces_the_packages_name_alone(tmp_path: Path, megatron: Path) -> None:
    found, place = scanned(tmp_path, megatron, "pass")
    assert found == {(place, "megatron.core.dist_checkpointing:save")}


def test_the_sweep_unread_loses_the_defining_module(
    tmp_path: Path, megatron: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seeded break: a registry's sweep by identity not read (the rule before) files the record under the package
    alone, where Megatron's own calls of ``serialization.save`` would not be counted replaced."""
    monkeypatch.setattr(framework_scan, "sweeps_any_name", lambda tree: False)
    found, place = scanned(tmp_path, megatron, SWEEP)
    assert found == {(place, "megatron.core.dist_checkpointing:save")}
