"""``megatron-conformance scan NAME==VERSION`` on three frameworks as published on the package index, none of which
replaces the chunked all-reduce: mcore-bridge, ms-swift and verl.

Each wheel is unpacked into the cache by :func:`~harness.targets.release_source.distribution_source` (fetched from
the index the first time: the test never skips), and its symbols are named against the newest release of the matrix,
as in a checkout with no target built. The starter written is the committed ``tests/published/<name>/starter.toml``;
the declaration edited from it by hand, ``megatron-conformance.toml`` beside it, differs from it in at most
:data:`MAX_EDITED` lines (``diff tests/published/<name>/starter.toml tests/published/<name>/megatron-conformance.toml``)
and declares replaced every symbol that the verdict tables written blind from the same source list
(``tests/published/expected/<name>.json``); both read as declarations.
"""

from __future__ import annotations

import difflib
import json
import sys
import tomllib
from pathlib import Path

import pytest

from harness.source.starter import main
from harness.subjects.declaration import read_declaration_file
from harness.targets.release_source import distribution_source
from tests.pytest_helpers import ROOT

PUBLISHED = {"mcore-bridge": "1.6.5", "ms-swift": "4.6.0", "verl": "0.9.1"}
MAX_EDITED = 10
"""The hand edit a starter may need to become the declaration, in lines."""
NOT_DECLARED = {
    "megatron.core.models.gpt.gpt_model:GPTModel.prepare_inputs_for_generation": (
        "an attribute mcore-bridge sets to None on built models: no method of Megatron's"
    ),
    "megatron.core.models.gpt.fine_grained_callables:PostProcessNode.forward_impl": (
        "declared where the newest release defines the class, megatron.core.models.common.utils"
    ),
    "megatron.core.transformer.experimental_attention_variant.dsa:hadamard_transform": (
        "verl back-fills fast_hadamard_transform in sys.modules, which dsa reads once, when first imported: an apply "
        "cannot bind it again, and declared replaced it would be checked against a binding that is never remade"
    ),
}
"""Symbols of the blind tables the declarations name otherwise, and why."""


def edited_lines(starter: str, declaration: str) -> int:
    """Lines changed, added or removed between the two texts (a changed line counts once)."""
    matcher = difflib.SequenceMatcher(a=starter.splitlines(), b=declaration.splitlines(), autojunk=False)
    return sum(max(i2 - i1, j2 - j1) for tag, i1, i2, j1, j2 in matcher.get_opcodes() if tag != "equal")


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_a_published_frameworks_starter_is_the_committed_one_and_a_few_lines_from_its_declaration(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    version = PUBLISHED[name]
    distribution_source(name, version)  # fetched from the package index where the cache lacks it
    monkeypatch.setattr(sys, "path", [entry for entry in sys.path if not (Path(entry) / "megatron" / "core").is_dir()])
    written = tmp_path / "starter.toml"
    assert main([f"{name}=={version}", "--output", str(written)], envdir=tmp_path / "no-targets") == 0
    folder = ROOT / "tests" / "published" / name
    starter = written.read_text()
    assert starter == (folder / "starter.toml").read_text(), (
        f"the starter changed: rewrite tests/published/{name}/starter.toml with `megatron-conformance scan "
        f"{name}=={version} --output ...` (no target built) and carry the hand edit over"
    )
    text = (folder / "megatron-conformance.toml").read_text()
    assert edited_lines(starter, text) <= MAX_EDITED
    for read in (written, folder / "megatron-conformance.toml"):
        assert read_declaration_file(read).distribution == f"{name}=={version}"
    declaration = tomllib.loads(text)
    assert declaration["subject"]["distribution"] == f"{name}=={version}"
    assert "source_root" not in declaration["subject"] and "patch" not in declaration
    assert declaration["symbols_patch"]["module"].startswith(declaration["subject"]["adapter_package"].split(".")[0])
    replaced = {key for key, usage in declaration["megatron_symbols"].items() if usage.startswith("replaces")}
    expected = json.loads((ROOT / "tests" / "published" / "expected" / f"{name}.json").read_text())["symbols"]
    missing = {symbol.partition("@")[0] for symbol in expected} - replaced - set(NOT_DECLARED)
    assert not missing, f"{name}: the blind table's replaced symbols the declaration leaves out: {sorted(missing)}"
