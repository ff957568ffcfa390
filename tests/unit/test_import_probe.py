"""The import probe (``harness/install/import_probe.py``) on this interpreter: the module that raised, the error as
Python printed it, the traceback's files innermost first (through an import chain and a re-raise), which installed
distribution owns them, and which distributions are torch-coupled."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from harness.install.distributions import installed, owners
from harness.install.import_probe import _owned_frames, coupled_modules, probe
from tests.fake_index import installed_distribution


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder on the probe's path holding ``usesengine`` (whose import re-raises what ``engine`` raised) and
    ``fine``."""
    folder = tmp_path / "site-packages"
    (folder / "engine").mkdir(parents=True)
    (folder / "engine" / "__init__.py").write_text("\n\nraise RuntimeError('cudnn shared object not found')\n")
    (folder / "usesengine.py").write_text(
        "try:\n    import engine\nexcept RuntimeError as err:\n    raise ImportError('no engine') from err\n"
    )
    (folder / "fine.py").write_text("")
    monkeypatch.setenv("PYTHONPATH", str(folder))
    return folder


def test_the_probe_names_each_module_that_raised_with_its_files_innermost_first(site: Path) -> None:
    failures = probe(Path(sys.executable), ["fine", "usesengine", "engine"])
    assert sorted(failures) == ["engine", "usesengine"]
    chained = failures["usesengine"]
    assert chained.error == "ImportError: no engine"
    files = [(Path(f).parent.name, Path(f).name, n) for f, n in chained.frames if not f.startswith("<")]
    assert files == [
        ("engine", "__init__.py", 3),
        ("site-packages", "usesengine.py", 2),
        ("site-packages", "usesengine.py", 4),
        ("importlib", "__init__.py", files[-1][2]),
    ], files
    assert failures["engine"].error == "RuntimeError: cudnn shared object not found"
    assert failures["engine"].where().endswith("engine/__init__.py:3")


def test_the_cause_is_the_changed_distribution_that_owns_the_innermost_file(site: Path) -> None:
    installed_distribution(site, "engine-core", "2.0", ("engine/__init__.py",))
    installed_distribution(site, "usesengine", "1.0", ("usesengine.py",))
    failure = probe(Path(sys.executable), ["usesengine"])["usesengine"]
    distributions = installed(site)
    owned = owners(site, distributions)
    assert list(_owned_frames(failure, owned, {"engine-core", "usesengine"})) == ["engine-core", "usesengine"]
    assert list(_owned_frames(failure, owned, {"usesengine"})) == ["usesengine"]
    assert _owned_frames(failure, owned, set()) == {}


def test_an_interpreter_that_dies_is_a_failure_of_every_module_never_a_pass(site: Path) -> None:
    (site / "dies.py").write_text("import os\nos._exit(3)\n")
    failures = probe(Path(sys.executable), ["fine", "dies"])
    assert sorted(failures) == ["dies", "fine"]
    assert all(f.error.startswith("the interpreter ended before reporting") for f in failures.values()), failures


def test_the_torch_coupled_modules_are_those_of_changed_distributions_that_require_torch(site: Path) -> None:
    installed_distribution(
        site, "visionlib", "0.28.0", ("visionlib/__init__.py", "visionlib/ops.py"), ("torch==2.13.0",)
    )
    installed_distribution(site, "tokenlib", "1.0", ("tokenlib.py",), ("numpy",))
    installed_distribution(site, "oldvision", "0.1", ("oldvision/__init__.py",), ('torch; python_version < "3"',))
    installed_distribution(site, "keptvision", "1.0", ("keptvision/__init__.py",), ("torch",))
    changed = {"visionlib", "tokenlib", "oldvision"}
    assert coupled_modules(installed(site), changed, "3.11") == {"visionlib": "visionlib"}
