"""``python -m tests.install_table [--blind DIR] [--targets VERSION ...] [--cold]``: each published framework
installed beside every matrix target as a session installs it (:mod:`harness.install.framework_install`), timed, and
checked: the venv must import the megatron-core its target imports. Writes ``docs/install.md`` and exits 1 where a
venv does not.

The frameworks are those of ``tests/published/`` (their declarations' ``[subject]`` install) and, with ``--blind``,
each framework folder under ``DIR`` that a build backend can install (``pip install .``). A warm build is one whose
downloads uv's cache already holds; ``--cold`` also builds each framework once on the first target with an empty uv
cache of its own, as on a fresh machine. ``--only NAME ...`` measures those frameworks again and keeps the other
rows of the last run (``reports/install-table.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from harness import REPO_ROOT
from harness.install.framework_install import FrameworkInstall, RequirementsError, requirements_python, venv_folder
from harness.subjects.declaration import read_declaration_file
from harness.subjects.requirements import declared_install, project_name
from harness.targets.matrix import Target, load_matrix, venv_python

PUBLISHED = REPO_ROOT / "tests" / "published"
PAGE = REPO_ROOT / "docs" / "install.md"
RECORDED = REPO_ROOT / "reports" / "install-table.json"
KINDS = (
    "left out",
    "put ",
    "took ",
    "years behind",
    "kept as it is",
    "not beside the framework's requirements",
    "cannot be resolved",
    "without its dependencies",
)
"""The report lines the table counts: what the install left out, put back, resolved for the target's torch, took
from far back, kept with a pin it cannot meet, could not mend, or could not resolve (then the framework goes in
without its dependencies)."""


@dataclass
class Cell:
    seconds: float
    imports: bool
    detail: str
    findings: list[str] = field(default_factory=list)
    installed: bool = True
    """False where the framework could not be installed at all (its own build failed)."""


def published_installs() -> dict[str, FrameworkInstall]:
    """The install each published framework's declaration asks for."""
    found = {}
    for folder in sorted(PUBLISHED.iterdir()):
        declaration = folder / "megatron-conformance.toml"
        if declaration.is_file():
            found[folder.name] = declared_install(read_declaration_file(declaration))
    return found


def blind_installs(root: Path) -> tuple[dict[str, FrameworkInstall], list[str]]:
    """Each framework folder under ``root`` that has a build configuration, installed as ``pip install .`` does, and
    the names of those that have none (nothing a user could install)."""
    found, none = {}, []
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        if (folder / "pyproject.toml").is_file() or (folder / "setup.py").is_file():
            named = project_name(folder)
            found[folder.name] = FrameworkInstall(folders=(folder,), frameworks=(named,) if named else ())
        else:
            none.append(folder.name)
    return found, none


IMPORTS = "import megatron.core, megatron.core.distributed.finalize_model_grads; print(megatron.core.__version__)"


def megatron_imports(python: Path, target_python: Path) -> tuple[bool, str]:
    """Whether the venv of ``python`` imports Megatron as the target's venv does (the same version printed)."""
    printed = []
    for interpreter in (target_python, python):
        done = subprocess.run([str(interpreter), "-c", IMPORTS], capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            return False, (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1][:200]
        printed.append(done.stdout.strip().splitlines()[-1])
    return printed[0] == printed[1], printed[1]


def build(target: Target, install: FrameworkInstall, cache: Path | None = None) -> Cell:
    """Build the framework's venv on ``target`` from nothing (its record removed), timed."""
    target_python = venv_python(REPO_ROOT / ".nox", target.session)
    subprocess.run(["rm", "-rf", str(venv_folder(target_python.parent.parent, install))], check=True)
    environment = dict(os.environ)
    if cache is not None:
        os.environ["UV_CACHE_DIR"] = str(cache)
    start = time.perf_counter()
    try:
        python, report = requirements_python(target_python, install, target.requirements(), target.python)
    except RequirementsError as err:
        said = [line.strip() for line in str(err).splitlines() if line.strip()]
        errors = [line for line in said[1:] if re.match(r"\w*(Error|Exception)\b", line)]
        why = said[0].split(": ", 1)[-1] + (f" ({errors[-1][:200]})" if errors else "")
        return Cell(time.perf_counter() - start, False, why, installed=False)
    finally:
        os.environ.clear()
        os.environ.update(environment)
    seconds = time.perf_counter() - start
    imports, detail = megatron_imports(python, target_python)
    said = [_first_lines(line) for line in report if any(k in line for k in KINDS)]
    return Cell(seconds, imports, detail, said)


def _first_lines(line: str) -> str:
    """A report line as one line of the page: uv's explanation of a failed resolution is cut after its first
    sentence's lines."""
    parts = [part.strip() for part in line.splitlines() if part.strip()]
    return " ".join(parts[:3]) + (" ..." if len(parts) > 3 else "")


def page(
    cells: dict[str, dict[str, Cell]], cold: dict[str, Cell], targets: list[Target], uninstallable: list[str]
) -> str:
    lines = [
        "# Installing published frameworks beside each target",
        "",
        "What `python -m tests.install_table --blind <folder of framework sources> --cold` measured: each framework "
        "installed beside each matrix target as a target session installs it (resolution with the target's torch "
        "and megatron-core held, dependencies that require torch resolved to releases that accept the target's, "
        "the import probe, the release-age check), on this machine (2 cores, CPU torch). A cell is the seconds of a "
        "warm build (uv's cache holds the downloads) and whether the venv then imports the megatron-core its target "
        "imports (`ok`); `cold` is the same build on the first target with an empty uv cache.",
        "",
        "| framework | cold | " + " | ".join(t.session for t in targets) + " |",
        "|---|---|" + "---|" * len(targets),
    ]
    for name, row in cells.items():
        first = cold.get(name)
        cold_text = f"{first.seconds:.0f} s" if first else "—"
        shown = [_shown(row[t.session]) if t.session in row else "—" for t in targets]
        lines.append(f"| {name} | {cold_text} | " + " | ".join(shown) + " |")
    for name in uninstallable:
        lines.append(f"| {name} | no `pyproject.toml` or `setup.py`: nothing to install |" + " |" * len(targets))
    lines += ["", "## What each install left out, resolved or said", ""]
    for name, row in cells.items():
        lines.append(f"### {name}")
        lines.append("")
        said: dict[str, list[str]] = {}
        for session, cell in row.items():
            failed = "not installed" if not cell.installed else "does not import Megatron"
            for finding in cell.findings or ([] if cell.imports else [f"{failed}: {cell.detail}"]):
                said.setdefault(finding, []).append(session)
        if not said:
            lines.append("Nothing left out, resolved back or forced: the framework's requirements install as they are.")
        for finding, sessions in said.items():
            lines.append(f"- {', '.join(sessions)}: {finding}")
        lines.append("")
    return "\n".join(lines)


def _shown(cell: Cell) -> str:
    if not cell.installed:
        return "not installed"
    return f"{cell.seconds:.0f} s {'ok' if cell.imports else 'NO'}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blind", type=Path, help="a folder of framework sources, one folder per framework")
    parser.add_argument("--targets", nargs="*", help="megatron-core versions (default: every matrix target)")
    parser.add_argument("--only", nargs="*", help="framework names (default: all)")
    parser.add_argument("--cold", action="store_true", help="also build each framework once with an empty uv cache")
    options = parser.parse_args(argv)
    targets = [
        t
        for t in load_matrix(REPO_ROOT / "matrix.yaml").targets
        if not options.targets or t.megatron.location.partition("==")[2] in options.targets
    ]
    blind, uninstallable = blind_installs(options.blind) if options.blind else ({}, [])
    installs = {**published_installs(), **blind}
    installs = {n: i for n, i in installs.items() if not options.only or n in options.only}
    cells, cold = _recorded() if options.only else ({}, {})
    for name, install in installs.items():
        row = cells.setdefault(name, {})
        for index, target in enumerate(targets):
            if not venv_python(REPO_ROOT / ".nox", target.session).exists():
                print(f"{target.session}: no target venv (nox --install-only -s {target.session})", file=sys.stderr)
                continue
            if options.cold and index == 0:
                with tempfile.TemporaryDirectory(prefix="uv-cold-") as cache:
                    cold[name] = build(target, install, Path(cache))
                print(f"{name} {target.session} cold: {cold[name].seconds:.0f} s", flush=True)
            row[target.session] = cell = build(target, install)
            print(f"{name} {target.session}: {cell.seconds:.0f} s imports={cell.imports} {cell.detail}", flush=True)
            for finding in cell.findings:
                print(f"    {finding[:300]}", flush=True)
    PAGE.write_text(page(cells, cold, targets, uninstallable) + "\n")
    RECORDED.parent.mkdir(exist_ok=True)
    RECORDED.write_text(
        json.dumps(
            {
                "cells": {n: {s: c.__dict__ for s, c in r.items()} for n, r in cells.items()},
                "cold": {n: c.__dict__ for n, c in cold.items()},
            },
            indent=1,
        )
    )
    return 0 if all(c.imports for row in cells.values() for c in row.values()) else 1


def _recorded() -> tuple[dict[str, dict[str, Cell]], dict[str, Cell]]:
    """The cells of the last run, which a run of ``--only`` some frameworks updates."""
    if not RECORDED.is_file():
        return {}, {}
    data = json.loads(RECORDED.read_text())
    cells = {n: {s: Cell(**c) for s, c in row.items()} for n, row in data["cells"].items()}
    return cells, {n: Cell(**c) for n, c in data["cold"].items()}


if __name__ == "__main__":
    raise SystemExit(main())
