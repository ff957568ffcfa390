"""A framework installed beside a target as ``pip install`` would (``harness/install/framework_install.py``), on real
target venvs through uv: a folder whose dependencies only its ``setup.py`` lists, pins of torch and megatron-core
overridden and said, a dependency that cannot be built left out in one line, ``leave_out``, and a resolution that
fails reported whole. Each seeded break has its correct variant beside it.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from harness.install.framework_install import RECORD, RequirementsError
from tests.pytest_helpers import run_target_cases, subject_python

SESSION = "megatron-0.15"
MEGATRON = "0.15.3"

PATCH = '''"""A framework's Megatron patch: a router gating it applies by a call."""

from megatron.core.transformer.moe import router


def gating(self, logits):
    return logits


def apply():
    router.TopKRouter.gating = gating
'''


def framework(root: Path, dependencies: list[str], name: str = "pubfw") -> Path:
    """A framework whose dependencies are dynamic: its ``pyproject.toml`` says so, its ``setup.py`` lists them."""
    package = root / name
    (package / "mcore").mkdir(parents=True)
    (package / "__init__.py").write_text('__version__ = "0.1"\n')
    (package / "mcore" / "__init__.py").write_text("")
    (package / "mcore" / "patch.py").write_text(PATCH)
    (root / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n\n'
        f'[project]\nname = "{name}"\nversion = "0.1"\ndynamic = ["dependencies"]\n'
    )
    (root / "setup.py").write_text(f"from setuptools import setup\n\nsetup(install_requires={dependencies!r})\n")
    return root


def declare(root: Path, name: str = "pubfw", extra: str = "") -> Path:
    path = root / "megatron-conformance.toml"
    path.write_text(
        f'[subject]\nsource_root = "."\nadapter_package = "{name}.mcore"\nrequirements = ["."]\n{extra}\n'
        f'[symbols_patch]\nmodule = "{name}.mcore.patch"\napply = "apply"\n\n'
        "[megatron_symbols]\n"
        f'"megatron.core.transformer.moe.router:TopKRouter.gating" = "replaces with {name}.mcore.patch:gating"\n'
    )
    return path


def report_of(python: Path) -> list[str]:
    return json.loads((python.parent.parent / RECORD).read_text())["report"]


def run_in(python: Path, code: str) -> str:
    return subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def test_a_framework_with_dynamic_dependencies_is_installed_through_dot_and_imported_from_the_venv(
    tmp_path: Path,
) -> None:
    """``requirements = ["."]`` builds the folder with its backend: ``attrs``, listed only in ``setup.py``, is
    installed; the session imports the framework from the venv (its checkout's copy is never on ``sys.path``) and
    is green with its patch checked applied."""
    root = framework(tmp_path / "fw", ["attrs>=21.3"])
    declaration = declare(root)
    python = subject_python(SESSION, [declaration])
    where = run_in(python, "import attrs, pubfw.mcore.patch as p; print(p.__file__)")
    assert "site-packages" in where and str(root) not in where, where
    assert report_of(python) == []
    run = run_target_cases(SESSION, ["cases/test_api_fingerprint.py"], tmp_path / "run", declaration)
    assert run.returncode == 0, run.failed()
    assert run.report_dir is not None
    recorded = json.loads((run.report_dir / "replaced_symbols.json").read_text())["symbols"]
    assert [(r["how"], r["verdict"]) for r in recorded] == [("applied", "fits")], recorded


def test_pins_of_torch_and_megatron_core_are_overridden_and_said(tmp_path: Path) -> None:
    """A framework asking for another torch and a newer megatron-core: the target's stay (uv's override), the
    report says so, the megatron-core range as the upgrade being checked, and the session's findings carry it."""
    root = framework(tmp_path / "fw", ["attrs>=21.3", "torch<2", "megatron-core==0.17.0"])
    declaration = declare(root)
    python = subject_python(SESSION, [declaration])
    assert run_in(python, "import torch, megatron.core as m; print(torch.__version__, m.__version__)") == (
        f"2.13.0+cpu {MEGATRON}"
    )
    report = report_of(python)
    assert sorted(report) == [
        f"megatron-core {MEGATRON} is outside the range `pubfw` `0.1` declares (`==0.17.0`): "
        "this is the upgrade being checked",
        "pubfw 0.1 asks for torch<2: overridden, the target's 2.13.0+cpu stays",
    ], report
    run = run_target_cases(SESSION, ["cases/test_api_fingerprint.py"], tmp_path / "run", declaration)
    assert run.returncode == 0, run.failed()
    assert run.report_dir is not None
    findings = json.loads((run.report_dir / "summary.json").read_text())["findings"]
    assert {f["text"] for f in findings if f["family"] == "install"} == set(report), findings


def test_pins_the_target_meets_are_not_reported(tmp_path: Path) -> None:
    root = framework(tmp_path / "fw", ["attrs>=21.3", "torch>=2.1", "megatron-core>=0.13"])
    assert report_of(subject_python(SESSION, [declare(root)])) == []


def test_a_dependency_that_cannot_be_built_is_left_out_in_one_line_and_the_rest_installed(tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "setup.py").write_text("raise RuntimeError('needs nvcc to build')\n")
    root = framework(tmp_path / "fw", ["attrs>=21.3", f"brokenbuild @ {broken.as_uri()}"])
    python = subject_python(SESSION, [declare(root)])
    report = report_of(python)
    assert len(report) == 1 and report[0].startswith("left out brokenbuild @ "), report
    assert "it cannot be built here (RuntimeError: needs nvcc to build)" in report[0], report
    assert run_in(python, "import attrs, pubfw; print('ok')") == "ok"


def test_the_frameworks_own_build_failing_is_an_error_naming_its_cause_never_a_dependency_left_out(
    tmp_path: Path,
) -> None:
    """A framework whose own build fails (Primus' ``pyproject.toml`` lists a git dependency hatch refuses) cannot be
    left out as a dependency that cannot be built would be: the venv would hold the target alone and every family
    would check nothing of the framework. The install fails, saying why."""
    root = framework(tmp_path / "fw", ["attrs>=21.3"])
    (root / "setup.py").write_text("raise RuntimeError('direct references are not allowed')\n")
    with pytest.raises(RequirementsError) as raised:
        subject_python(SESSION, [declare(root)])
    message = str(raised.value)
    assert message.startswith(f"key 'subject.requirements': {root} cannot be installed beside the target's packages")
    assert "direct references are not allowed" in message, message


def test_leave_out_leaves_a_named_dependency_out(tmp_path: Path) -> None:
    root = framework(tmp_path / "fw", ["attrs>=21.3", "tomli-w"])
    python = subject_python(SESSION, [declare(root, extra='leave_out = ["tomli-w"]')])
    assert report_of(python) == ["left out tomli-w, as [subject] leave_out says"]
    assert run_in(
        python, "import importlib.util as u; print(u.find_spec('tomli_w'), u.find_spec('attrs') is None)"
    ) == ("None False")


def test_a_resolution_that_fails_is_reported_whole_and_the_framework_installed_alone(tmp_path: Path) -> None:
    """The target's numpy range (``<2`` on 0.15) holds: a framework asking for numpy 2 cannot be resolved beside it.
    uv's explanation is reported whole; the framework goes in without its dependencies, so its source is there and
    each family that imports it names the missing module."""
    root = framework(tmp_path / "fw", ["numpy>=2", "attrs>=21.3"])
    python = subject_python(SESSION, [declare(root)])
    report = report_of(python)
    assert report[0].startswith("the requirements cannot be resolved beside the target's pins: No solution found")
    assert "numpy>=2" in report[0] and "numpy<2" in report[0] and "unsatisfiable" in report[0], report
    assert report[1] == f"installed {root} without its dependencies: a module it imports may be missing"
    assert run_in(python, "import pubfw, numpy; print(numpy.__version__ < '2')") == "True"
