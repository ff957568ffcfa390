"""``scan`` on a small framework against two small Megatron trees: the symbols it finds and how it names them (a
module imported by name followed, a symbol one tree lacks optional, the Megatron functions that call a replaced one),
the patch assignments it sees through a loop over names and a registry's records, and the guesses it writes. Every
framework in ``tests/frameworks/`` is measured against real Megatron in ``tests/e2e/test_scan_declarations.py``."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from harness.contracts.api_fingerprint.framework_scan import scan_framework
from harness.contracts.api_fingerprint.starter import main, starter_declaration
from harness.subjects.declaration import read_declaration_file

FINALIZE = """
from .. import parallel_state


def _allreduce_non_tensor_model_parallel_grads(model, config, tp_group=None):
    return parallel_state.get_tensor_model_parallel_group()


_allreduce_layernorm_grads = _allreduce_non_tensor_model_parallel_grads


def finalize_model_grads(model, config=None):
    _allreduce_non_tensor_model_parallel_grads(model, config)
"""
FRAMEWORK = """
import importlib

FINALIZE = "megatron.core.distributed.finalize_model_grads"
NAMES = ("_allreduce_non_tensor_model_parallel_grads", "_allreduce_layernorm_grads")
_saved = {}


def chunked(model, config, tp_group=None):
    module = importlib.import_module(FINALIZE)
    return module.parallel_state.get_tensor_model_parallel_group()


def apply(chunk_mb=64.0):
    module = importlib.import_module(FINALIZE)
    for name in NAMES:
        _saved[name] = getattr(module, name)
        setattr(module, name, chunked)


def undo():
    module = importlib.import_module(FINALIZE)
    for name, value in _saved.items():
        setattr(module, name, value)
"""
REGISTRY = """
from .records import Edit, register

FINALIZE = "megatron.core.distributed.finalize_model_grads"


@register("chunked_grad_allreduce")
def _factory(args):
    return [Edit(FINALIZE, "_allreduce_non_tensor_model_parallel_grads", _replacement(args.grad_chunk_bytes))]


def apply_patches(args, names=None):
    return names
"""


def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


def megatron_tree(root: Path, with_group: bool) -> Path:
    state = "def get_tensor_model_parallel_group():\n    return None\n" if with_group else "X = 1\n"
    return write(
        root,
        {
            "megatron/__init__.py": "",
            "megatron/core/__init__.py": "",
            "megatron/core/parallel_state.py": state,
            "megatron/core/distributed/__init__.py": "from .finalize_model_grads import finalize_model_grads\n",
            "megatron/core/distributed/finalize_model_grads.py": FINALIZE,
        },
    )


def test_scan_names_symbols_follows_imported_modules_and_marks_what_a_tree_lacks(tmp_path: Path) -> None:
    trees = [megatron_tree(tmp_path / "new", True), megatron_tree(tmp_path / "old", False)]
    framework = write(
        tmp_path / "fw", {"fw/__init__.py": "", "fw/mcore/__init__.py": "", "fw/mcore/patch.py": FRAMEWORK}
    )
    found = scan_framework(framework, trees)
    symbols = {symbol.key: symbol for symbol in found.symbols}
    finalize = "megatron.core.distributed.finalize_model_grads"
    assert symbols[f"{finalize}:_allreduce_non_tensor_model_parallel_grads"].usage == "replaces"
    assert symbols[f"{finalize}:_allreduce_non_tensor_model_parallel_grads"].replacement == "fw.mcore.patch:chunked"
    assert symbols[f"{finalize}:finalize_model_grads"].usage == "relies"
    group = symbols["megatron.core.parallel_state:get_tensor_model_parallel_group"]
    assert (group.usage, group.optional) == ("calls", True)
    assert {(p.key.rpartition(":")[2], p.scope) for p in found.patches} >= {
        ("_allreduce_non_tensor_model_parallel_grads", "apply"),
        ("_allreduce_non_tensor_model_parallel_grads", "undo"),
    }
    text = starter_declaration(found, framework)
    for guess in (
        '# applied = "call"',
        '# apply = "apply"',
        '# undo = "undo"',
        '# argument = "chunk_mb"',
        '# unit = "MiB"',
    ):
        assert guess in text, text
    declaration = framework / "starter.toml"
    declaration.write_text(text)
    assert read_declaration_file(declaration).adapter_package == "fw.mcore"


def test_a_registrys_records_are_patches_and_its_apply_and_name_the_guess(tmp_path: Path) -> None:
    trees = [megatron_tree(tmp_path / "new", True)]
    files = {
        "fw/__init__.py": "",
        "fw/mcore/__init__.py": "from .patches import apply_patches\n",
        "fw/mcore/patches.py": REGISTRY,
    }
    found = scan_framework(write(tmp_path / "fw", files), trees)
    assert [(p.key.rpartition(":")[2], p.scope) for p in found.patches] == [
        ("_allreduce_non_tensor_model_parallel_grads", "_factory")
    ]
    text = starter_declaration(found, tmp_path / "fw")
    for guess in ('# module = "fw.mcore"', '# apply = "apply_patches"', '# undo = "returned"'):
        assert guess in text, text
    assert '# arguments = { names = ["chunked_grad_allreduce"] }' in text
    assert '# argument = "args.grad_chunk_bytes"' in text


def test_scan_without_megatron_to_name_against_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "path", [str(tmp_path)])
    assert main([str(tmp_path)], envdir=tmp_path / "no-venvs") == 2
    error = capsys.readouterr().err
    assert (
        error.startswith("megatron-conformance scan: no Megatron source to name symbols against")
        and error.count("\n") == 1
    )
