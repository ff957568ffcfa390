"""``megatron-conformance [--subject PATH ...] [nox arguments] [-- pytest arguments]``.

A framework installs the gate like any other test tool and runs it from its own checkout: the matrix, the cases and
the harness are the installed version's (upgrading the gate is one version bump), while the target venvs
(``.nox/megatron-conformance/``, apart from the framework's own nox venvs), the reports (``reports/``) and the
subject (``[tool.megatron-conformance]`` of the framework's ``pyproject.toml``, or ``--subject``) are the
framework's. Everything else goes to nox as it is, so ``megatron-conformance -s megatron-0.15 megatron-0.19``,
``-R``, ``-l``, ``-s report`` and ``-- <test id>`` mean what they mean in a checkout of the gate.

The sessions run from the gate's own directory (nox changes into the noxfile's), so every path handed to them is made
absolute here; and a run that would check no adapter of the framework's (no declaration found, no ``--subject``)
stops with one line instead of checking the gate's reference subject and going green.
"""

from __future__ import annotations

import os
import sys
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

GATE_ROOT = Path(__file__).resolve().parents[2]
"""The gate's own files (noxfile.py, matrix.yaml, harness/, cases/): a checkout, or ``megatron_conformance/`` in
site-packages."""
COMMAND = "megatron-conformance"
DECLARATION_TABLE = "megatron-conformance"
VENVS = Path(".nox") / "megatron-conformance"
"""The target venvs under the framework's checkout: beside, never among, the framework's own nox venvs."""
REFERENCE = "harness.reference"
SCAN_MODULE = "harness.source.starter"
USAGE = f"""usage: {COMMAND} [--subject PATH ...] [nox arguments] [-- pytest arguments]

Runs the megatron-conformance gate's nox sessions from this checkout: target venvs in {VENVS}/, reports in reports/.
The subject is [tool.{DECLARATION_TABLE}] of the nearest pyproject.toml that has one, or --subject (a declaration
.toml, a .py file or a package directory; --subject {REFERENCE} checks the gate's own reference subject). Give
--subject more than once to check several in turn (each its own session and report matrix).

  {COMMAND} -s megatron-0.15 megatron-0.19     two targets
  {COMMAND} -R -s megatron-0.15 -- <test id>   reuse the venv, one case (every red prints such a line)
  {COMMAND} -s report -- megatron-0.15 megatron-0.19
                                               reports/compatibility.md and .html of those targets
  {COMMAND} -l                                 every session
  {COMMAND} scan [PATH] [--output FILE]         a starter declaration from the framework's source
  {COMMAND} scan NAME==VERSION                 the same, of a release on the package index
"""
_SESSION_OPTIONS = ("-s", "--session", "--sessions", "-e")
_LISTING_OPTIONS = ("-l", "--list", "--list-sessions", "--json")
_SUBJECTLESS_SESSIONS = {"report"}
"""Sessions that read what target sessions left and check no subject."""


class UsageError(Exception):
    """The command line or the framework's pyproject.toml cannot be used; the message says which and why."""


@dataclass(frozen=True)
class Invocation:
    """What one run of the command does: the nox arguments, and the environment the gate's sessions read."""

    nox_arguments: list[str]
    environment: dict[str, str]
    notes: list[str]


def split_subject(arguments: Sequence[str]) -> tuple[list[str], list[str]]:
    """Each ``--subject X`` or ``--subject=X`` taken out of the arguments before ``--`` (after it they are pytest's);
    several are checked in turn, each in a session of its own."""
    rest: list[str] = []
    subjects = []
    items = iter(arguments)
    for argument in items:
        if argument == "--":
            rest += [argument, *items]
            break
        if argument == "--subject":
            subject = next(items, None)
            if subject is None:
                raise UsageError("--subject needs a value: a declaration .toml, a .py file or a package directory")
            subjects.append(subject)
        elif argument.startswith("--subject="):
            subjects.append(argument.split("=", 1)[1])
        else:
            rest.append(argument)
    return subjects, rest


def declares_subject(pyproject: Path) -> bool:
    """Whether ``pyproject`` has a ``[tool.megatron-conformance]`` table (the declaration itself is checked by the
    sessions, which name the key at fault)."""
    try:
        document = tomllib.loads(pyproject.read_text())
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise UsageError(f"{pyproject}: cannot be read as TOML: {err}") from None
    return DECLARATION_TABLE in document.get("tool", {})


def find_project(start: Path) -> tuple[Path, Path | None]:
    """The framework's checkout root and its declaring ``pyproject.toml``: the nearest one at or above ``start`` that
    has the table (a monorepo's package or ``docs/`` may have a pyproject.toml of its own without it); without one
    anywhere, the nearest pyproject.toml's directory (else ``start``) and None."""
    pyprojects = [d / "pyproject.toml" for d in (start, *start.parents) if (d / "pyproject.toml").is_file()]
    declaring = next((p for p in pyprojects if declares_subject(p)), None)
    if declaring is not None:
        return declaring.parent, declaring
    return (pyprojects[0].parent if pyprojects else start), None


def _absolute(value: str, cwd: Path) -> str:
    """A path typed relative to where the command runs, made absolute: the sessions run from the gate's root."""
    return str((cwd / value).resolve())


def _subjects(values: Sequence[str], cwd: Path) -> str:
    """The subjects as the environment variable names them: comma-separated, each made absolute by :func:`_subject`."""
    return ",".join(_subject(value.strip(), cwd) for value in values if value.strip())


def _subject(value: str, cwd: Path) -> str:
    """A subject that names a file or directory made absolute, even one that does not exist (the session then says
    so, naming the right place); a dotted name (``harness.reference``) as given."""
    looks_like_path = os.sep in value or value.endswith((".toml", ".py")) or (cwd / value).exists()
    return _absolute(value, cwd) if looks_like_path else value


def _sessions(nox_arguments: Sequence[str]) -> list[str] | None:
    """The sessions named with ``-s``/``-e`` before ``--``; None when none are (nox runs its default targets)."""
    named: list[str] | None = None
    taking = False
    for argument in nox_arguments:
        if argument == "--":
            break
        if argument in _SESSION_OPTIONS:
            named, taking = named or [], True
        elif argument.startswith("-"):
            taking = False
        elif taking:
            named = [*(named or []), argument]
    return named


def needs_subject(nox_arguments: Sequence[str]) -> bool:
    """Whether the run checks a subject: not a listing, and not only sessions that read reports."""
    head = nox_arguments[: list(nox_arguments).index("--")] if "--" in nox_arguments else nox_arguments
    if any(argument in _LISTING_OPTIONS for argument in head):
        return False
    sessions = _sessions(nox_arguments)
    return sessions is None or not set(sessions) <= _SUBJECTLESS_SESSIONS


def plan(arguments: Sequence[str], cwd: Path, environ: dict[str, str]) -> Invocation:
    """What to run for ``arguments`` typed in ``cwd``. The subject is ``--subject``, else the environment's
    ``MEGATRON_CONFORMANCE_SUBJECT`` (said in a note when a declaration is there too), else the declaration of the
    nearest pyproject.toml that has one; a run that checks a subject and has none is a usage error."""
    from harness.formats.environment import (
        ENVDIR_ENV_VAR,
        LAUNCHER_ENV_VAR,
        REPORTS_ENV_VAR,
        SUBJECT_ENV_VAR,
    )

    subjects, nox_arguments = split_subject(arguments)
    project, declaring = find_project(cwd)
    notes = []
    environment = {
        LAUNCHER_ENV_VAR: COMMAND,
        REPORTS_ENV_VAR: _absolute(environ.get(REPORTS_ENV_VAR) or str(project / "reports"), cwd),
        ENVDIR_ENV_VAR: _absolute(environ.get(ENVDIR_ENV_VAR) or str(project / VENVS), cwd),
    }
    if subjects:
        environment[SUBJECT_ENV_VAR] = _subjects(subjects, cwd)
    elif environ.get(SUBJECT_ENV_VAR):
        environment[SUBJECT_ENV_VAR] = _subjects(environ[SUBJECT_ENV_VAR].split(","), cwd)
        if declaring is not None:
            notes.append(f"{COMMAND}: {SUBJECT_ENV_VAR} names the subject; {declaring}'s declaration is not used")
    elif declaring is not None:
        environment[SUBJECT_ENV_VAR] = str(declaring)
    elif needs_subject(nox_arguments):
        raise UsageError(
            f"no pyproject.toml at or above {cwd} has a [tool.{DECLARATION_TABLE}] table, and no --subject was "
            f"given: declare your adapter there, or name it with --subject (--subject {REFERENCE} checks the gate's "
            "reference subject)"
        )
    return Invocation(["-f", str(GATE_ROOT / "noxfile.py"), *nox_arguments], environment, notes)


def version() -> str:
    """The installed gate's version (a checkout that was never installed says so)."""
    try:
        return metadata.version(COMMAND)
    except metadata.PackageNotFoundError:
        return f"(not installed: running from {GATE_ROOT})"


def main(argv: Sequence[str] | None = None) -> int:
    """Become nox on the gate's noxfile for the framework in the working directory (nox's exit status is the
    command's, and Ctrl-C reaches nox alone); help, the version and a usage error answer here."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    head = arguments[: arguments.index("--")] if "--" in arguments else arguments
    if "-h" in head or "--help" in head:
        print(USAGE)
        return 0
    if "--version" in head:
        print(f"{COMMAND} {version()}")
        return 0
    if arguments[:1] == ["scan"]:
        # The scan reads the framework's source in the gate's own code: the same interpreter, the gate on its path.
        scan = [sys.executable, "-m", SCAN_MODULE, *arguments[1:], "--envdir", str(VENVS)]
        environment = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(GATE_ROOT), os.environ.get("PYTHONPATH")])),
        }
        os.execve(sys.executable, scan, environment)
    sys.path.insert(0, str(GATE_ROOT))
    try:
        invocation = plan(arguments, Path.cwd(), dict(os.environ))
    except UsageError as err:
        print(f"{COMMAND}: {err}", file=sys.stderr)
        return 2
    for note in invocation.notes:
        print(note, file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    command = [sys.executable, "-m", "nox", *invocation.nox_arguments]
    os.execve(sys.executable, command, {**os.environ, **invocation.environment})


if __name__ == "__main__":
    raise SystemExit(main())
