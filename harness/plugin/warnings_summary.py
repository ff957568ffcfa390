"""The terminal's warnings, one line per kind for installed packages: Megatron's and torch's own warnings (about 200
on megatron-0.13: Apex missing, deprecations) would otherwise bury the red sections under pytest's warnings summary.

A warning is *installed packages'* when the file Python attributes it to lies in the interpreter's installed packages
(site-packages, dist-packages) or its standard library, and is not the gate's (``harness/``, ``cases/``), the
subject's (a declaration's source root and packages, a module subject's path or top-level package, even where those
are installed) or the runner's (pytest, pluggy, xdist, hypothesis: their warnings are about the cases). Those are
grouped by category and message (whitespace and object addresses normalised) and shown as one line each, naming the
package the files lie in. Every other warning (the subject's, the harness's, a file of unknown origin) stays in
pytest's own warnings summary, in full. The attribution is the warning's own (its ``stacklevel``): a deprecated torch
function the subject calls is torch's when torch's warning names torch's file; it is still one of the lines.

Rank processes print their warnings to their own stderr, in the middle of the progress lines (Megatron's "Apex is
not installed" and torch's deprecations, once per rank): a rank start hook (:data:`harness.ranks.pool.RANK_START_HOOKS`)
diverts the installed packages' ones, by the same rule, into a file per rank that the summary counts with the rest;
the subject's and every other warning of a rank still reach its stderr.

The grouped lines stand where pytest's summary does: after the failures with their red sections, before the
findings, advisories and the short test summary; pytest's final line still counts every warning. ``--all-warnings``
gives pytest's full summary back. Loaded with ``-p harness.plugin.warnings_summary`` by the case command
(:mod:`harness.plugin.command`).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import shutil
import sys
import sysconfig
import tempfile
import warnings
from collections.abc import Generator, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from harness import REPO_ROOT
from harness.plugin import session_state
from harness.plugin.warm_sessions import SHARED_WARNINGS_MARK
from harness.ranks.pool import RANK_START_HOOKS
from harness.ranks.rank_warnings import WARNINGS_ENV_VAR, warning_record

ALL_WARNINGS = "--all-warnings"
FULL_LIST = f"full list: add -- {ALL_WARNINGS}"
"""The grouped summary's last line: what to add to the nox command (or pytest's) for pytest's own summary."""
RUNNER_PACKAGES = frozenset({"_pytest", "pytest", "pluggy", "xdist", "hypothesis"})
"""Packages that run the cases: a warning of theirs is about the cases or the harness, never upstream noise."""
_ADDRESS = re.compile(r"0x[0-9a-fA-F]+")
_FROZEN = re.compile(r"<frozen ([\w.]+)>")

_recorded: list[tuple[str, str, str]] = []
"""``(category, message, filename)`` of every warning pytest recorded in this process (under xdist the controller
records every worker's), from the same calls, replays included, that make pytest's own list: sorted out at the
terminal summary, once the subject in force is known, by the same rule as pytest's list."""
_GROUPED = pytest.StashKey[list[tuple[str, str, str]]]()
"""``(category, message, package)`` of the installed packages' warnings, taken out of pytest's summary."""
_MADE_DIRECTORY = pytest.StashKey[Path]()
_RANK_HOOK = pytest.StashKey[functools.partial[None]]()


@dataclass(frozen=True)
class Ownership:
    """Where a warning comes from: the installed packages and standard library (``installed``), and what is the
    gate's or the subject's even when it lies there (``own_dirs``, ``own_packages``)."""

    installed: tuple[Path, ...]
    own_dirs: tuple[Path, ...]
    own_packages: frozenset[str]

    def installed_package(self, filename: str) -> str | None:
        """The dotted package a warning's file lies in (``megatron.core.fusions``) when it is installed packages'
        noise; ``None`` for the gate's, the subject's, the runner's and a file of unknown origin, which stay in
        pytest's own summary."""
        frozen = _FROZEN.fullmatch(filename)
        if frozen:
            names = frozen[1].split(".")
            parts = tuple(names[:-1] or names)
        else:
            path = Path(filename)
            if not path.is_absolute():
                return None
            path = path.resolve()
            root = next((root for root in self.installed if path.is_relative_to(root)), None)
            if root is None or any(path.is_relative_to(own) for own in self.own_dirs):
                return None
            parts = path.relative_to(root).parent.parts or (path.stem,)
        return None if parts[0] in self.own_packages else ".".join(parts)


def installed_dirs() -> tuple[Path, ...]:
    """The interpreter's installed packages and standard library, the deepest first: the base interpreter's
    site-packages lies inside its standard library."""
    paths = sysconfig.get_paths()
    dirs = {paths[key] for key in ("purelib", "platlib", "stdlib", "platstdlib")}
    dirs |= {entry for entry in sys.path if Path(entry).name in ("site-packages", "dist-packages")}
    return tuple(sorted({Path(d).resolve() for d in dirs}, key=lambda d: len(d.parts), reverse=True))


def ownership_of(config: pytest.Config) -> Ownership:
    """The gate's and the subject's code in this session (the subject only once the gate plugin has configured it)."""
    own_dirs = [REPO_ROOT / "harness", REPO_ROOT / "cases"]
    own_packages = set(RUNNER_PACKAGES)
    if session_state.TARGET in config.stash:
        subject = session_state.subject_ref_of(config)
        if subject.declaration is not None:
            own_dirs.append(subject.declaration.source_root)
            own_packages |= subject.declaration.packages
        elif Path(subject.name).exists():
            own_dirs.append(Path(subject.name))
        else:
            own_packages.add(subject.name.split(".")[0])
    return Ownership(installed_dirs(), tuple(d.resolve() for d in own_dirs), frozenset(own_packages))


def normalised(message: str) -> str:
    """One line that stands for every occurrence of a message: whitespace collapsed (Megatron's messages wrap and
    pad), object addresses replaced (they differ per object)."""
    return _ADDRESS.sub("0x...", " ".join(message.split()))


def grouped_lines(warnings_seen: Iterable[tuple[str, str, str]], width: int) -> list[str]:
    """One line per kind (category and normalised message) of ``(category, message, package)`` warnings, the most
    frequent first, each cut to ``width``: ``37x UserWarning from megatron.core.models: Apex is not installed...``,
    naming the package all its occurrences lie in; the last line says how to get the full list."""
    kinds: dict[tuple[str, str], list[str]] = {}
    for category, message, package in warnings_seen:
        kinds.setdefault((category, normalised(message)), []).append(package)
    digits = len(str(max(map(len, kinds.values()), default=0)))
    lines = []
    for (category, message), packages in sorted(kinds.items(), key=lambda kind: len(kind[1]), reverse=True):
        line = f"{len(packages):>{digits}}x {category} from {_common_package(packages)}: {message}"
        lines.append(line if len(line) <= width else line[: width - 3] + "...")
    return [*lines, FULL_LIST]


def _common_package(packages: list[str]) -> str:
    """The package that holds every file of a kind (``megatron.core.models`` for ``backends`` and
    ``gpt.gpt_layer_specs``), else their top-level packages; three levels at most, the message is what tells one kind
    from another on an 80-column line."""
    try:
        common = os.path.commonpath([package.replace(".", "/") for package in packages]).split("/")
    except ValueError:  # a file's path (a diverted warning of no installed package) beside a package's name
        common = []
    return ".".join(common[:3]) or ", ".join(sorted({package.split(".")[0] for package in packages}))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("megatron-conformance").addoption(
        ALL_WARNINGS,
        action="store_true",
        help="pytest's full warnings summary, instead of one line per kind of the installed packages' warnings",
    )


def divert_rank_warnings(ownership: Ownership, directory: str, rank: int, world_size: int) -> None:
    """In a rank: the installed packages' warnings written to this rank's file instead of its stderr."""
    show = warnings.showwarning
    path = Path(directory) / f"rank{rank}-{os.getpid()}.jsonl"

    def divert(message: Warning | str, category: type[Warning], filename: str, lineno: int, *args: Any) -> None:
        if ownership.installed_package(filename) is None:
            show(message, category, filename, lineno, *args)
            return
        try:
            with path.open("a") as out:
                out.write(warning_record(category, message, filename))
        except OSError:
            show(message, category, filename, lineno, *args)

    warnings.showwarning = divert


def rank_warnings(directory: Path) -> list[tuple[str, str, str]]:
    """``(category, message, filename)`` of every warning the ranks of this session diverted, with those of the
    imports a warm run made once for all its subjects (:mod:`harness.plugin.warm_sessions`); a line a killed rank
    left half-written is skipped."""
    found = []
    shared = sorted(directory.parent.glob("*.jsonl")) if (directory.parent / SHARED_WARNINGS_MARK).exists() else []
    for path in [*shared, *sorted(directory.glob("*.jsonl"))]:
        for line in path.read_text().splitlines():
            with contextlib.suppress(ValueError):
                category, message, filename = json.loads(line)
                found.append((str(category), str(message), str(filename)))
    return found


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    """The ranks' hook, once the gate plugin has named the subject (its warnings must keep reaching stderr)."""
    if config.getoption("all_warnings"):
        return
    directory = os.environ.get(WARNINGS_ENV_VAR)
    if directory is None:
        directory = tempfile.mkdtemp(prefix="megatron-conformance-warnings-")
        os.environ[WARNINGS_ENV_VAR] = directory
        config.stash[_MADE_DIRECTORY] = Path(directory)
    hook = config.stash[_RANK_HOOK] = functools.partial(divert_rank_warnings, ownership_of(config), directory)
    RANK_START_HOOKS.append(hook)


def pytest_unconfigure(config: pytest.Config) -> None:
    if _RANK_HOOK in config.stash and config.stash[_RANK_HOOK] in RANK_START_HOOKS:
        RANK_START_HOOKS.remove(config.stash[_RANK_HOOK])
    if _MADE_DIRECTORY in config.stash:
        os.environ.pop(WARNINGS_ENV_VAR, None)
        shutil.rmtree(config.stash[_MADE_DIRECTORY], ignore_errors=True)


def pytest_warning_recorded(warning_message: warnings.WarningMessage) -> None:
    """Kept with its category and message: pytest's own record of it is a formatted string."""
    category = getattr(warning_message.category, "__name__", "Warning")
    _recorded.append((category, str(warning_message.message), warning_message.filename))


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> Generator[None, None, None]:
    """Around every summary (pytest's included): the installed packages' warnings taken out of pytest's for the
    grouped lines, and put back for its final line, which counts every warning."""
    everything = terminalreporter.stats.get("warnings")
    if not config.getoption("all_warnings"):
        ownership = ownership_of(config)
        directory = os.environ.get(WARNINGS_ENV_VAR)
        diverted = rank_warnings(Path(directory)) if directory else []
        package_of = {filename: ownership.installed_package(filename) for _, _, filename in [*_recorded, *diverted]}
        config.stash[_GROUPED] = [
            (category, message, package_of[filename])
            for category, message, filename in _recorded
            if package_of[filename] is not None
        ]
        # Diverted warnings reach no other summary: one the rule does not count as installed keeps its file's name.
        config.stash[_GROUPED] += [
            (category, message, package_of[filename] or Path(filename).name) for category, message, filename in diverted
        ]
        # A report leaves pytest's list only where a grouped line counts its file's warnings.
        if everything:
            terminalreporter.stats["warnings"] = [
                report
                for report in everything
                if report.fslocation is None or package_of.get(report.fslocation[0]) is None
            ]
    try:
        return (yield)
    finally:
        if everything:
            terminalreporter.stats["warnings"] = everything


@pytest.hookimpl(tryfirst=True, specname="pytest_terminal_summary")
def pytest_terminal_summary_of_grouped_warnings(terminalreporter: Any, config: pytest.Config) -> None:
    """The installed packages' warnings, one line per kind, after pytest's failures and warnings summary and before
    the gate's sections; nothing under pytest's ``--disable-warnings``. (pytest takes a hook only by a ``pytest_``
    name: a second one for the same hook needs its own.)"""
    grouped = config.stash.get(_GROUPED, [])
    if not grouped or not terminalreporter.hasopt("w"):
        return
    terminalreporter.write_sep("-", f"{len(grouped)} warnings from installed packages, one line per kind")
    for line in grouped_lines(grouped, config.get_terminal_writer().fullwidth):
        terminalreporter.write_line(line)
