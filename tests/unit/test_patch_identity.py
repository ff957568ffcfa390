"""A replacement is compared by what it is: the same function made again by a second import of its module, or by a
second call of the apply that makes it as a closure, is the same replacement (module, qualname and code), so an
import-applied patch is checked against itself as green; another function never is."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

from harness.contracts.api_fingerprint import patch_effects
from harness.contracts.api_fingerprint.patch_effects import bound_to, same_function

SOURCE = """
def make():
    def patched(x):
        return x
    return patched


def replacement(y):
    return y


def lookalike(y):
    return y
"""


@pytest.fixture
def module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    (tmp_path / "twice_imported.py").write_text(SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "twice_imported", raising=False)
    return importlib.import_module("twice_imported")


def test_a_function_made_again_by_a_second_import_is_the_same_replacement(module) -> None:
    first = module.replacement
    again = importlib.reload(module).replacement
    assert first is not again and first.__code__ is not again.__code__
    assert same_function(again, first) and bound_to(again, first)
    assert bound_to(staticmethod(again), first) and bound_to(again, staticmethod(first))
    assert same_function(module.make(), module.make())


def test_another_function_is_never_the_same_replacement(module) -> None:
    assert not same_function(module.lookalike, module.replacement)
    assert not bound_to(module.lookalike, module.replacement)
    assert not bound_to(None, module.replacement)


def test_compared_by_id_a_second_import_is_red_against_itself(module, monkeypatch: pytest.MonkeyPatch) -> None:
    """Seeded break: the comparison by id (the rule before) takes the re-imported function for another one."""
    first = module.replacement
    again = importlib.reload(module).replacement
    monkeypatch.setattr(patch_effects, "same_function", lambda found, replacement: found is replacement)
    assert not bound_to(again, first)
