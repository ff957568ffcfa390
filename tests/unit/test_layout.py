"""The shape of ``harness/``: every package says in its ``__init__`` what lives there, and imports only the packages
``harness.MAY_IMPORT`` allows it, so the noxfile (nox's own interpreter: no torch, no pytest) can load what it needs
and the layers stay readable. Within the layers, no file imports one that imports it back (a circle, imports under
``TYPE_CHECKING`` and inside functions included), and no file outgrows :data:`MAX_MODULE_LINES`."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from harness import MAY_IMPORT, REPO_ROOT

HARNESS = REPO_ROOT / "harness"
SEEDED = HARNESS / "sensitivity" / "seeded"
MAX_MODULE_LINES = 700


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


def _module_name(path: Path, root: Path) -> str:
    parts = ["harness", *path.relative_to(root).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def module_imports(root: Path) -> dict[str, dict[str, int]]:
    """Every harness module under ``root`` (seeded subjects aside) with the harness modules it imports and the line
    of the first such import: absolute and relative, ``from package import module`` resolved to the module, lazy and
    ``TYPE_CHECKING`` imports alike."""
    files = {
        _module_name(path, root): path
        for path in sorted(root.rglob("*.py"))
        if not path.is_relative_to(root / "sensitivity" / "seeded")
    }

    def known(name: str) -> str | None:
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, dict[str, int]] = {}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges: dict[str, int] = {}
        for node in ast.walk(ast.parse(path.read_text())):
            imported: list[str] = []
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, *([node.module] if node.module else [])])
                imported = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in files else base for alias in node.names]
            elif isinstance(node, ast.Import):
                imported = [alias.name for alias in node.names]
            for target in imported:
                resolved = known(target) if target.startswith("harness") else None
                if resolved and resolved != name:
                    edges.setdefault(resolved, node.lineno)
        graph[name] = edges
    return graph


def import_circles(root: Path) -> list[str]:
    """One line per circle between harness files under ``root``: ``a (line) -> b (line) -> a``."""
    graph = module_imports(root)
    circles: list[str] = []
    seen: set[frozenset[str]] = set()

    def walk(start: str, path: list[str]) -> None:
        for target in graph[path[-1]]:
            if target == start:
                members = frozenset(path)
                if members not in seen:
                    seen.add(members)
                    hops = [f"{a} (line {graph[a][b]})" for a, b in zip(path, [*path[1:], start], strict=True)]
                    circles.append(" -> ".join([*hops, start]))
            elif target not in path and target > start:
                walk(start, [*path, target])

    for start in sorted(graph):
        walk(start, [start])
    return circles


def test_no_circle_between_harness_files() -> None:
    assert import_circles(HARNESS) == []


def test_a_circle_is_named_even_under_type_checking(tmp_path: Path) -> None:
    """The seeded break: a file that takes a type back from the file importing it, as the allocation tracker once
    took ``RankReport`` from the equivalence comparison."""
    (tmp_path / "contracts").mkdir()
    (tmp_path / "contracts" / "__init__.py").write_text("")
    (tmp_path / "contracts" / "report.py").write_text("from harness.contracts.tracker import Tracker\n")
    (tmp_path / "contracts" / "tracker.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .report import Report\nclass Tracker: ...\n"
    )
    assert import_circles(tmp_path) == [
        "harness.contracts.report (line 1) -> harness.contracts.tracker (line 3) -> harness.contracts.report"
    ]


def test_no_harness_module_outgrows_the_limit() -> None:
    sizes = {path: len(path.read_text().splitlines()) for path in HARNESS.rglob("*.py")}
    assert {str(path.relative_to(REPO_ROOT)): n for path, n in sizes.items() if n > MAX_MODULE_LINES} == {}
