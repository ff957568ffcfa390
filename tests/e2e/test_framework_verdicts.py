"""Frameworks written blind in the ways real ones apply their patch get the verdicts written for them beforehand
(``framework_verdicts.py``): ``tern`` (a context manager, its budget in MiB), ``finch`` (a registry's named patch
applied from an ``args`` namespace, undone by what apply returns; its own dependency ``attrs`` installed from its
``pyproject.toml``) and ``petrel`` (``install(chunk_bytes)`` requires its budget; its splitter groups grads by dtype).

Also here, each red in one line: a framework whose dependency is not installed, and a parent package that patches
Megatron when the framework imports its adapter by its dotted name. The full table, every framework on four targets,
is ``nox -s frameworks`` (``docs/frameworks.md``).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.e2e.framework_verdicts import EXPECTED, TARGETS
from tests.framework_table import declaration, observed
from tests.pytest_helpers import ROOT, SharedRuns, on_one_target, run_target_cases, selected_parameters

NEW = ("tern", "finch", "petrel")
IN_CI = ("petrel",)
"""``nox -s tests`` checks petrel (the required budget and the regrouping splitter); ``nox -s tests-all`` also tern
and finch. There tern's context manager and MiB budget are checked by the unit tests of the patch forms and by the
scan's api-fingerprint runs, finch's requirements by the missing-dependency test below and its registry and ``args``
by the unit tests of the patch forms."""
ALL_CASES = ("cases",)
SESSION = "megatron-0.15"


@pytest.fixture(scope="module")
def runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> SharedRuns:
    """The new frameworks this run checks on each target in one warm run, in the venv that holds finch's
    requirements too."""
    selected = selected_parameters(request, "name", "session")
    plan = [(session, ALL_CASES, declaration(name)) for name, session in selected]
    return SharedRuns(plan, lambda: tmp_path_factory.mktemp("frameworks"))


@pytest.mark.parametrize("session", on_one_target(TARGETS, [SESSION]))
@pytest.mark.parametrize("name", on_one_target(NEW, IN_CI))
def test_a_framework_gets_the_verdict_written_for_it(name: str, session: str, runs: SharedRuns) -> None:
    run = runs.run(session, ALL_CASES, declaration(name))
    assert run.report_dir is not None
    found, expected = observed(run.report_dir), EXPECTED[name][session]
    unexpected = {red: run.verdicts[red][1][:600] for red in found.reds - set(expected.reds)}
    assert not unexpected, f"{name} on {session}: reds no Megatron behaviour explains: {unexpected}"
    assert found.reds == set(expected.reds), f"{name} on {session}: expected reds missing: {set(expected.reds)}"
    assert found.not_declared == {family for family, _ in expected.not_declared}, (name, found.not_declared)
    if name == "petrel":
        # petrel all-reduces a lone grad in place: a grad with gaps (no Megatron path makes one) comes out wrong under
        # gloo, which takes the storage as contiguous. An advisory, listed, never a red.
        advised = {
            a["case"].split("::")[-1] for a in json.loads((run.report_dir / "summary.json").read_text())["advisories"]
        }
        assert "test_matches_upstream_on_grads_with_gaps" in advised, advised
        # Its splitter groups grads by dtype: every grad once with its own param, in another order.
        assert "test_order" in advised and "test_partition" not in found.reds, advised


def copy_framework(name: str, tmp_path: Path) -> Path:
    root = tmp_path / name
    shutil.copytree(ROOT / "tests" / "frameworks" / name, root, ignore=shutil.ignore_patterns("__pycache__"))
    return root


def test_a_missing_dependency_is_one_line_naming_the_module_and_the_key_that_installs_it(tmp_path: Path) -> None:
    root = copy_framework("finch", tmp_path)
    path = root / "megatron-conformance.toml"
    path.write_text(path.read_text().replace('requirements = ["."]\n', ""))
    selection = ["cases/test_api_fingerprint.py", "cases/test_import_side_effects.py"]
    run = run_target_cases(SESSION, selection, tmp_path / "report", subject=path)
    failed = run.require_red("finch without its requirements")
    line = (
        "needs module 'attrs', which this target's venv does not have: add what installs it to [subject] requirements"
    )
    assert failed and all(line in text for text in failed.values()), {n: t[:300] for n, t in failed.items()}
    assert "Traceback" not in run.output, run.output[-3000:]


PARENT_PATCH = """
import importlib as _importlib
import logging as _logging
import os as _os

_logging.getLogger("petrel").setLevel(_os.environ.get("PETREL_LOG_LEVEL", "INFO"))
_finalize = _importlib.import_module("megatron.core.distributed.finalize_model_grads")
_finalize._allreduce_layernorm_grads = lambda *args, **kwargs: None
"""


def test_a_parent_package_that_patches_megatron_is_red_on_the_import_the_framework_makes(tmp_path: Path) -> None:
    """petrel's top package patches Megatron, reads the environment and sets its logger's level; its adapter's own
    file stays clean. The import
    of the adapter's file alone is green; ``import petrel.mcore`` (parents' ``__init__`` included) is red for the
    patch and lists the environment read and the logger's level as an advisory."""
    root = copy_framework("petrel", tmp_path)
    init = root / "petrel" / "__init__.py"
    init.write_text(init.read_text() + PARENT_PATCH)
    path = root / "megatron-conformance.toml"
    run = run_target_cases(SESSION, ["cases/test_import_side_effects.py"], tmp_path / "report", subject=path)
    failed = run.require_red("petrel with a patching parent")
    dotted = "test_importing_the_adapter_as_the_framework_does_changes_nothing"
    assert dotted in failed and "_allreduce_layernorm_grads: re-bound" in failed[dotted], failed
    assert "test_importing_the_adapter_with_real_megatron_changes_nothing" not in failed, failed
    advised = {
        a["case"].split("::")[-1]: a
        for a in json.loads((tmp_path / "report" / "summary.json").read_text())["advisories"]
    }
    assert "test_importing_the_adapter_as_the_framework_does_has_no_other_effects" in advised, advised
