"""The target stays the target when a framework is installed beside it (``harness/install/``), on the real 0.15 target
venv through uv: a dependency that needs a newer torch takes the release that accepts the target's; a dependency
that makes ``import megatron.core`` raise is found by its traceback, left out and named; an import that only the
install breaks is never reported as Megatron's; a dependency taken from years back is said with what forced it.

Stand-ins are wheels in a local folder handed to uv as find-links, as this machine's own torch wheel is. Each seeded
break sits beside its correct variant: with the step that mends it switched off, the same framework leaves the venv
broken.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from harness.install import framework_install
from harness.install.import_probe import Mending
from harness.targets.venv_install import pip_settings
from tests.e2e.test_framework_install import MEGATRON, SESSION, declare, framework, report_of, run_in
from tests.fake_index import distribution_wheel
from tests.pytest_helpers import run_target_cases, subject_python

TORCH = "2.13.0+cpu"
TARGET = f"megatron-core {MEGATRON}, torch {TORCH}"
RAISES = 'raise RuntimeError("cudnn shared object not found")\n'


@pytest.fixture
def local_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder of stand-in wheels that uv finds as it finds this machine's torch wheel."""
    folder = tmp_path / "index"
    folder.mkdir()
    monkeypatch.setenv("PIP_FIND_LINKS", " ".join([*pip_settings().get("find-links", []), str(folder)]))
    return folder


def coupled_index(folder: Path) -> None:
    """``coupledvision``: 1.0 accepts any torch 2, 2.0 (the newest) asks for a torch newer than the target's."""
    module = {"coupledvision/__init__.py": "import torch\n"}
    distribution_wheel(folder, "coupledvision", "1.0", module, ("torch>=2.0",))
    distribution_wheel(folder, "coupledvision", "2.0", module, ("torch>=2.14",))


def installed_version(python: Path, name: str) -> str:
    return run_in(python, f"import importlib.metadata as m; print(m.version({name!r}))")


def test_a_dependency_needing_a_newer_torch_takes_the_release_that_accepts_the_targets(
    tmp_path: Path, local_index: Path
) -> None:
    coupled_index(local_index)
    python = subject_python(SESSION, [declare(framework(tmp_path / "fw", ["coupledvision"]))])
    assert installed_version(python, "coupledvision") == "1.0"
    assert run_in(python, "import torch; print(torch.__version__)") == TORCH
    assert report_of(python) == [
        f"coupledvision 2.0 asks for torch>=2.14: took coupledvision 1.0, the newest release that accepts the "
        f"target's {TARGET}"
    ]


def test_seeded_break_without_the_coupled_resolution_the_newest_release_stays_with_its_pin_overridden(
    tmp_path: Path, local_index: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    coupled_index(local_index)
    monkeypatch.setattr(framework_install, "coupled_releases", lambda *args: [])
    python = subject_python(SESSION, [declare(framework(tmp_path / "fw", ["coupledvision"]))])
    assert installed_version(python, "coupledvision") == "2.0"
    assert report_of(python) == [f"coupledvision 2.0 asks for torch>=2.14: overridden, the target's {TORCH} stays"]


def test_a_dependency_whose_every_release_needs_a_newer_torch_is_kept_and_said(
    tmp_path: Path, local_index: Path
) -> None:
    """No release accepts the target's torch: kept as it is, said with uv's reason; it imports, so it stays."""
    distribution_wheel(local_index, "newtorchonly", "3.0", {"newtorchonly/__init__.py": ""}, ("torch>=2.14",))
    python = subject_python(SESSION, [declare(framework(tmp_path / "fw", ["newtorchonly"]))])
    assert installed_version(python, "newtorchonly") == "3.0"
    report = report_of(python)
    assert report[0].startswith(
        f"newtorchonly 3.0 asks for torch>=2.14 and no release of it accepts the target's {TARGET}"
    )
    assert report[0].endswith(": kept as it is"), report
    assert report[1:] == [f"newtorchonly 3.0 asks for torch>=2.14: overridden, the target's {TORCH} stays"]


def test_real_torchvision_takes_the_release_built_for_the_targets_torch_and_stays_only_where_it_imports(
    tmp_path: Path,
) -> None:
    """The issue's own case, on PyPI's torchvision: the newest release asks for a newer torch, so the one that asks
    for the target's is taken; on a machine whose torch is the CPU build, PyPI's torchvision still fails at import
    (``operator torchvision::nms does not exist``), so the probe leaves it out and says so, and whatever imports
    it behind an ``ImportError`` guard (transformers does) keeps working."""
    python = subject_python(SESSION, [declare(framework(tmp_path / "fw", ["torchvision"]))])
    report = report_of(python)
    took = [line for line in report if line.startswith("torchvision ") and ": took torchvision " in line]
    assert len(took) == 1, report
    chosen = took[0].split(": took torchvision ")[1].split(",")[0]
    present = run_in(python, "import importlib.util as u; print(u.find_spec('torchvision') is not None)") == "True"
    left_out = [line for line in report if line.startswith(f"left out torchvision {chosen}: importing torchvision")]
    if present:
        assert run_in(python, "import torchvision; print(torchvision.__version__)").startswith(chosen)
        assert left_out == [], report
    else:
        assert len(left_out) == 1 and f"beside the target's torch {TORCH}" in left_out[0], report
    assert run_in(python, "import megatron.core as m; print(m.__version__)") == MEGATRON


def standin_transformer_engine(folder: Path) -> None:
    """A Transformer Engine core wheel as this machine gets it: installed, and raising at import."""
    distribution_wheel(folder, "transformer-engine-standin", "1.0", {"transformer_engine/__init__.py": RAISES})


def test_a_dependency_that_breaks_megatrons_import_is_found_left_out_and_named(
    tmp_path: Path, local_index: Path
) -> None:
    standin_transformer_engine(local_index)
    python = subject_python(SESSION, [declare(framework(tmp_path / "fw", ["transformer-engine-standin==1.0"]))])
    assert run_in(
        python, "import megatron.core.distributed.finalize_model_grads, megatron.core as m; print(m.__version__)"
    ) == (MEGATRON)
    assert report_of(python) == [
        "left out transformer-engine-standin 1.0: importing megatron.core raised RuntimeError: cudnn shared object "
        "not found (transformer_engine/__init__.py:1); the target's venv imports it"
    ]


def test_seeded_break_without_the_probe_the_install_leaves_megatron_unimportable(
    tmp_path: Path, local_index: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    standin_transformer_engine(local_index)
    monkeypatch.setattr(framework_install, "mend", lambda *args: Mending())
    python = subject_python(SESSION, [declare(framework(tmp_path / "fw", ["transformer-engine-standin==1.0"]))])
    broken = subprocess.run([str(python), "-c", "import megatron.core"], capture_output=True, text=True)
    assert broken.returncode != 0 and "cudnn shared object not found" in broken.stderr


def test_what_the_install_breaks_for_good_is_never_reported_as_megatrons(tmp_path: Path) -> None:
    """The framework's own distribution ships the raising module, so nothing can be left out: the venv stays
    broken, its record says why, and the session's blocker names the install, not megatron-core."""
    root = framework(tmp_path / "fw", ["attrs>=21.3"])
    (root / "pyproject.toml").write_text(
        (root / "pyproject.toml").read_text()
        + '\n[tool.setuptools]\npackages = ["pubfw", "pubfw.mcore", "transformer_engine"]\n'
    )
    (root / "transformer_engine").mkdir()
    (root / "transformer_engine" / "__init__.py").write_text(RAISES)
    declaration = declare(root)
    python = subject_python(SESSION, [declaration])
    broken = framework_install.megatron_broken_by_install(python.parent.parent)
    assert broken is not None and broken.startswith(
        f"megatron-core {MEGATRON} imports in the target's venv but not beside the framework's requirements: "
        "importing megatron.core raised RuntimeError: cudnn shared object not found (transformer_engine/__init__.py:1)"
    ), broken
    run = run_target_cases(SESSION, ["cases/test_smoke.py"], tmp_path / "run", declaration)
    assert run.returncode != 0
    assert "the framework's requirements break this venv, not Megatron" in run.output, run.output[-3000:]
    assert f"megatron-core {MEGATRON} cannot be imported" not in run.output


def test_a_dependency_taken_from_years_back_is_said_with_what_forced_it(tmp_path: Path) -> None:
    python = subject_python(SESSION, [declare(framework(tmp_path / "fw", ["requests<2.20"]))])
    report = report_of(python)
    old = [line for line in report if line.startswith("requests 2.19.1 (2018-")]
    assert len(old) == 1 and "years behind requests " in old[0], report
    assert old[0].endswith(", the newest for Python 3.11: forced by pubfw 0.1 (`requests<2.20`)"), old
    ancient = [line for line in report if " years behind " in line]
    assert all(": forced by " in line for line in ancient), ancient


def test_a_dependency_at_its_newest_release_is_not_said(tmp_path: Path) -> None:
    python = subject_python(SESSION, [declare(framework(tmp_path / "fw", ["requests"]))])
    assert not [line for line in report_of(python) if " years behind " in line], report_of(python)
    assert json.loads((python.parent.parent / framework_install.RECORD).read_text())["megatron_broken"] is None
