"""``megatron-conformance scan`` against every framework in ``tests/frameworks/``, named against the built target
venvs' Megatron trees: the symbols it finds include every one of the hand-written declaration's, every symbol it
lists is named in the framework's source, its output reads as a declaration, and with its guesses edited the
declaration gets the same verdicts as the hand-written one (its ``[megatron_symbols]`` is what the api-fingerprint
family checks; the other tables are the edited guesses).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from harness.source.framework_scan import scan_framework
from harness.source.starter import ROLE_REPLACEMENT, megatron_trees, starter_declaration
from harness.subjects.declaration import read_declaration_file
from harness.targets.megatron_names import ALIAS_NAME, FINALIZE_MODULE, UPSTREAM_NAME
from tests.pytest_helpers import ROOT, SharedRuns, on_one_target, selected_parameters, target_python

FRAMEWORKS = sorted(path.parent.name for path in (ROOT / "tests" / "frameworks").glob("*/megatron-conformance.toml"))
"""The frameworks declared so far (a framework committed before its declaration form exists has none yet)."""
SCAN_MISSES = {
    "owl": (
        "megatron.core.transformer.multi_latent_attention:MultiLatentAttention.forward",
        "megatron.core.transformer.multi_latent_attention:MLASelfAttention.get_query_key_value_tensors",
    ),
    "dove": ("megatron.core.transformer.transformer_config:TransformerConfig.__post_init__",),
    "swift": ("megatron.core.transformer.transformer_layer:TransformerLayer.forward",),
}
"""Replacements the scan does not find, by framework, each added to the declaration by hand: owl binds its copies
with ``setattr`` in a loop over a plan of ``(class, name, copy)`` tuples, dove assigns ``cls.__post_init__`` where
``cls`` is a local holding ``TransformerConfig``, swift binds a closure as each built layer's own ``forward``; the
scan follows none of these."""
SESSION = "megatron-0.15"
FINGERPRINT = ("cases/test_api_fingerprint.py",)
FINGERPRINT_OF_COPIES = ("./cases/test_api_fingerprint.py",)
"""The same cases, for the scanned copies, in a warm run apart from the frameworks as written: a framework that
installs its own folder (``requirements = ["."]``) and its copy are two builds of one distribution, and one
requirements venv holds one."""


@pytest.fixture(scope="module")
def trees() -> list[Path]:
    for session in ("megatron-0.13", SESSION, "megatron-0.16", "megatron-0.19"):
        target_python(session)  # a missing venv fails here, naming the command that builds it
    return megatron_trees(ROOT / ".nox")


def declaration_of(name: str) -> Path:
    return ROOT / "tests" / "frameworks" / name / "megatron-conformance.toml"


@pytest.mark.parametrize("name", FRAMEWORKS)
def test_scan_finds_every_declared_symbol_and_only_names_in_the_source(name: str, trees: list[Path]) -> None:
    declared = read_declaration_file(declaration_of(name))
    found = scan_framework(declared.source_root, trees)
    keys = {symbol.key for symbol in found.symbols}
    missed = [key for key in declared.megatron_symbols if not any(m.strip() in keys for m in key.split("|"))]
    assert sorted(missed) == sorted(SCAN_MISSES.get(name, ())), f"{name}: the scan missed {missed}"
    source = "\n".join(path.read_text() for path in found.modules)
    invented = [key for key in keys if key.rpartition(":")[2].split(".")[-1] not in source]
    assert not invented, f"{name}: the scan lists symbols its source never names: {invented}"


def edited(starter: str) -> str:
    """The starter's guessed replacements settled as the declaration's author does: the patched all-reduce (and its
    alias) is the patch role's replacement; a symbol replaced by a closure the gate does not apply stays ``relies``."""
    patched = rf'("{FINALIZE_MODULE}:(?:{UPSTREAM_NAME}|{ALIAS_NAME})") = "relies"  # guess: replaced.*'
    return re.sub(patched, rf'\1 = "replaces with {ROLE_REPLACEMENT}"', starter)


def with_scanned_symbols(name: str, directory: Path, trees: list[Path]) -> Path:
    """A copy of the framework whose declaration keeps its own tables and takes scan's ``[megatron_symbols]``."""
    root = directory / name
    shutil.copytree(declaration_of(name).parent, root, ignore=shutil.ignore_patterns("__pycache__"))
    path = root / "megatron-conformance.toml"
    starter = edited(starter_declaration(scan_framework(root, trees), root))
    own = path.read_text().split("[megatron_symbols]")[0]
    path.write_text(own + "[megatron_symbols]" + starter.split("[megatron_symbols]")[1])
    read_declaration_file(path)
    return path


@pytest.fixture(scope="module")
def fingerprints(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, trees: list[Path]
) -> tuple[SharedRuns, dict[str, Path]]:
    """The api-fingerprint family of every framework this run checks, as written and with scan's symbols, in one
    warm run."""
    copies = tmp_path_factory.mktemp("scanned")
    names = [name for (name,) in selected_parameters(request, "name")]
    scanned = {name: with_scanned_symbols(name, copies, trees) for name in names}
    plan = [(SESSION, FINGERPRINT, declaration_of(name)) for name in names]
    plan += [(SESSION, FINGERPRINT_OF_COPIES, scanned[name]) for name in names]
    return SharedRuns(plan, lambda: tmp_path_factory.mktemp("runs")), scanned


SAME_VERDICTS_IN_TESTS = ("tern", "petrel", "lark")
"""The frameworks ``nox -s tests`` compares (a context manager, a required budget, a replaced method); the others in
``nox -s tests-all``."""


@pytest.mark.parametrize(
    "name", on_one_target([name for name in FRAMEWORKS if name not in SCAN_MISSES], SAME_VERDICTS_IN_TESTS)
)
def test_the_edited_starter_gets_the_same_verdicts(name: str, fingerprints: tuple[SharedRuns, dict[str, Path]]) -> None:
    runs, scanned = fingerprints
    written = runs.run(SESSION, FINGERPRINT, declaration_of(name))
    from_scan = runs.run(SESSION, FINGERPRINT_OF_COPIES, scanned[name])
    verdicts = {case: verdict for case, (verdict, _) in written.verdicts.items()}
    assert verdicts, written.output[-3000:]
    assert {case: verdict for case, (verdict, _) in from_scan.verdicts.items()} == verdicts, from_scan.failed()


def test_the_starter_reads_as_a_declaration_and_its_guesses_are_the_new_frameworks_tables(
    trees: list[Path], tmp_path: Path
) -> None:
    for name in ("tern", "finch", "petrel"):
        root = declaration_of(name).parent
        starter = tmp_path / f"{name}.toml"
        starter.write_text(starter_declaration(scan_framework(root, trees), tmp_path))
        assert (
            read_declaration_file(starter).adapter_package
            == read_declaration_file(declaration_of(name)).adapter_package
        )
        uncommented = re.sub(
            r"(?m)^# ((?:\[(?:patch|budget)\])|(?:module|applied|apply|context|undo|arguments|argument|unit) = )",
            r"\1",
            starter.read_text(),
        )
        guessed = {}
        for table in ("patch", "budget"):
            block = uncommented.split(f"[{table}]", 1)[1].split("\n#", 1)[0].split("\n\n", 1)[0]
            guessed[table] = {
                line.split(" = ")[0]: line.split(" = ", 1)[1].split("  #")[0]
                for line in block.strip().splitlines()
                if " = " in line
            }
        committed = declaration_of(name).read_text()
        for table, entries in guessed.items():
            for key, value in entries.items():
                assert f"{key} = {value}" in committed, (
                    f"{name}: the guess [{table}] {key} = {value} is not the committed one"
                )
