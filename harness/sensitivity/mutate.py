"""A mutated Megatron: a copy of a target's installed ``megatron`` package with a mutant's edits applied, and the
proof that a run really imports it.

The copy goes first on ``PYTHONPATH``. The smoke case would fail on it by design (Megatron is no longer imported from
the installed distribution), so smoke is never run on a mutant; a pre-flight import in the very environment of the run
proves instead that ``megatron.core`` comes from the copy, so a mutant cannot "survive" by not being loaded.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from harness import REPO_ROOT
from harness.sensitivity.catalogue import Mutant

_PREFLIGHT = "import megatron.core; print(megatron.core.__file__)"
_FIND_INSTALLED = (
    "import importlib.util, pathlib; "
    "print(pathlib.Path(importlib.util.find_spec('megatron.core').origin).resolve().parent.parent)"
)


class MutationError(RuntimeError):
    """A mutant cannot be made or loaded as declared: an edit matching another number of times, or a copy not loaded."""


def mutated_sources(mutant: Mutant, package: Path) -> dict[str, str]:
    """The new text of every file ``mutant`` edits in the ``megatron`` package at ``package``; nothing is written.

    Edits of one file apply in order. An edit whose ``find`` text occurs any other number of times than declared
    raises :class:`MutationError` naming the mutant, the file and the count.
    """
    texts: dict[str, str] = {}
    for edit in mutant.edits:
        if edit.file not in texts:
            path = package / edit.file
            if not path.is_file():
                raise MutationError(f"mutant {mutant.id}: {edit.file} does not exist in {package}")
            texts[edit.file] = path.read_text()
        found = texts[edit.file].count(edit.find)
        if found != edit.count:
            raise MutationError(
                f"mutant {mutant.id}: the find text occurs {found} times in {edit.file} ({package}), "
                f"expected exactly {edit.count}: {edit.find[:120]!r}"
            )
        texts[edit.file] = texts[edit.file].replace(edit.find, edit.replace)
    return texts


def build_mutant_package(mutant: Mutant, package: Path, workdir: Path) -> Path:
    """Copy the ``megatron`` package at ``package`` under ``workdir``, apply ``mutant`` and return the directory to
    put on ``PYTHONPATH``.

    Bytecode is copied with the sources (their timestamps preserved, so it stays valid): compiling all of Megatron in
    every process of a run costs about 40 s where loading the bytecode costs 6 s. An edited file's bytecode is
    deleted, so its new source is compiled.
    """
    sources = mutated_sources(mutant, package)
    site = workdir / "site"
    shutil.copytree(package, site / "megatron")
    for relative, text in sources.items():
        path = site / "megatron" / relative
        path.write_text(text)
        for stale in path.parent.glob(f"__pycache__/{path.stem}.*.pyc"):
            stale.unlink()
    return site


def _printed_path(python: Path, code: str, site: Path | None, timeout: float) -> tuple[Path | None, str]:
    """Run ``code`` in the venv of ``python`` (the mutated copy, if any, on the path) and read the path it printed
    last; ``None`` and the end of stderr when it failed."""
    completed = subprocess.run(
        [str(python), "-c", code], env=environment(site), cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout
    )
    if completed.returncode != 0:
        return None, completed.stderr
    return Path(completed.stdout.strip().splitlines()[-1]), ""


def installed_package(python: Path) -> Path:
    """The ``megatron`` package directory installed in the venv of ``python`` (found, not imported)."""
    package, error = _printed_path(python, _FIND_INSTALLED, None, timeout=120)
    if package is None:
        raise MutationError(f"{python}: cannot find megatron.core: {error.strip()[-2000:]}")
    return package


def environment(site: Path | None) -> dict[str, str]:
    """The run's environment: ours, with ``PYTHONPATH`` naming only the mutated copy (or nothing)."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    if site is not None:
        env["PYTHONPATH"] = str(site)
    return env


def verify_loaded(mutant: Mutant, python: Path, site: Path) -> None:
    """Import ``megatron.core`` exactly as the run will and fail unless it comes from the mutated copy."""
    imported, error = _printed_path(python, _PREFLIGHT, site, timeout=300)
    if imported is None:
        raise MutationError(f"mutant {mutant.id}: importing megatron.core failed:\n{error[-3000:]}")
    if not imported.resolve().is_relative_to(site.resolve()):
        raise MutationError(
            f"mutant {mutant.id}: megatron.core is imported from {imported.resolve()}, not from the copy {site}"
        )
