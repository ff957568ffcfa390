"""The shape of ``harness/``: every package says in its ``__init__`` what lives there, and imports only the packages
``harness.MAY_IMPORT`` allows it, so the noxfile (nox's own interpreter: no torch, no pytest) can load what it needs
and the layers stay readable."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from harness import MAY_IMPORT, REPO_ROOT

HARNESS = REPO_ROOT / "harness"
SEEDED = HARNESS / "sensitivity" / "seeded"


def harness_imports(path: Path) -> list[tuple[int, str]]:
    """Line and ``harness`` package of every import of a ``harness`` package in ``path`` (lazy ones included)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] if node.module != "harness" else [f"harness.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "harness" and len(parts) > 1 and parts[1] in MAY_IMPORT:
                found.append((node.lineno, parts[1]))
    return found


def layer_violations(root: Path) -> list[str]:
    """``file:line: <package> imports <package>`` for every import ``MAY_IMPORT`` does not allow under ``root``."""
    problems = []
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root)
        if relative.parts[0] not in MAY_IMPORT or path.is_relative_to(root / "sensitivity" / "seeded"):
            continue
        package = relative.parts[0]
        for line, imported in harness_imports(path):
            if imported != package and imported not in MAY_IMPORT[package]:
                problems.append(f"harness/{relative}:{line}: {package} imports {imported}")
    return problems


def test_every_package_is_in_the_table_and_says_what_it_holds() -> None:
    packages = {p.name for p in HARNESS.iterdir() if (p / "__init__.py").is_file()}
    assert packages == set(MAY_IMPORT)
    for name in packages:
        doc = ast.get_docstring(ast.parse((HARNESS / name / "__init__.py").read_text()))
        assert doc and len(doc) > 40, f"harness/{name}/__init__.py says nothing about what lives there"


def test_packages_import_only_what_they_may() -> None:
    assert layer_violations(HARNESS) == []


def test_a_forbidden_import_is_named(tmp_path: Path) -> None:
    (tmp_path / "targets").mkdir()
    (tmp_path / "targets" / "late.py").write_text("def f():\n    from harness.reports import results\n")
    assert layer_violations(tmp_path) == ["harness/targets/late.py:2: targets imports reports"]


def test_the_noxfile_loads_without_torch_pytest_or_hypothesis() -> None:
    """nox's own interpreter has none of them (``pip install "nox[uv]"`` is all a newcomer installs)."""
    blocked = "".join(f"sys.modules[{name!r}] = None; " for name in ("torch", "pytest", "hypothesis", "megatron"))
    code = f"import sys, runpy; {blocked}runpy.run_path('noxfile.py')"
    completed = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True)
    assert completed.returncode == 0, completed.stderr[-2000:]


def test_no_source_file_is_ignored_by_git() -> None:
    """An ignore rule that catches a source file (``reports/`` once caught ``harness/reports/``) ships a gate that
    cannot import itself from a fresh clone."""
    listed = subprocess.run(
        ["git", "ls-files", "--others", "--ignored", "--exclude-standard", "harness", "cases", "tests", "noxfile.py"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert [path for path in listed if "__pycache__" not in path and not path.endswith(".pyc")] == []
