"""``megatron-conformance [--subject PATH] [nox arguments] [-- pytest arguments]``.

A framework installs the gate like any other test tool and runs it from its own checkout: the matrix, the cases and
the harness are the installed version's (upgrading the gate is one version bump), while the target venvs
(``.nox/``), the reports (``reports/``) and the subject (``[tool.megatron-conformance]`` of the framework's
``pyproject.toml``, or ``--subject``) are the framework's. Everything else goes to nox as it is, so
``megatron-conformance -s megatron-0.15 megatron-0.19``, ``-R``, ``-l``, ``-s report`` and ``-- <test id>`` mean what
they mean in a checkout of the gate.
"""

from __future__ import annotations

import os
import subprocess
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
USAGE = f"""usage: {COMMAND} [--subject PATH] [nox arguments] [-- pytest arguments]

Runs the megatron-conformance gate's nox sessions from this checkout: target venvs in .nox/, reports in reports/.
The subject is [tool.{DECLARATION_TABLE}] of the nearest pyproject.toml, or --subject (a declaration .toml, a .py
file, a package directory or a dotted module).

  {COMMAND} -s megatron-0.15 megatron-0.19     two targets
  {COMMAND} -R -s megatron-0.15 -- <test id>   reuse the venv, one case (every red prints such a line)
  {COMMAND} -s report                          reports/compatibility.md and .html from the targets that ran
  {COMMAND} -l                                 every session
"""


class UsageError(Exception):
    """The command line or the framework's pyproject.toml cannot be used; the message says which and why."""


@dataclass(frozen=True)
class Invocation:
    """What one run of the command does: the nox arguments, and the environment the gate's sessions read."""

    nox_arguments: list[str]
    environment: dict[str, str]
    notes: list[str]


def split_subject(arguments: Sequence[str]) -> tuple[str | None, list[str]]:
    """``--subject X`` or ``--subject=X`` taken out of the arguments before ``--`` (after it they are pytest's)."""
    rest: list[str] = []
    subject = None
    items = iter(arguments)
    for argument in items:
        if argument == "--":
            rest += [argument, *items]
            break
        if argument == "--subject":
            subject = next(items, None)
            if subject is None:
                raise UsageError("--subject needs a value: a declaration .toml, a .py file or a dotted module")
        elif argument.startswith("--subject="):
            subject = argument.split("=", 1)[1]
        else:
            rest.append(argument)
    return subject, rest


def find_pyproject(start: Path) -> Path | None:
    """The nearest ``pyproject.toml`` at or above ``start``: the framework's checkout root."""
    for directory in (start, *start.parents):
        if (directory / "pyproject.toml").is_file():
            return directory / "pyproject.toml"
    return None


def declares_subject(pyproject: Path) -> bool:
    """Whether ``pyproject`` has a ``[tool.megatron-conformance]`` table (the declaration itself is checked by the
    sessions, which name the key at fault)."""
    try:
        document = tomllib.loads(pyproject.read_text())
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise UsageError(f"{pyproject}: cannot be read as TOML: {err}") from None
    return DECLARATION_TABLE in document.get("tool", {})


def _subject_path(subject: str, cwd: Path) -> str:
    """A subject given as a path made absolute (the sessions run from the gate's root); a dotted name as given."""
    path = cwd / subject
    return str(path.resolve()) if path.exists() else subject


def plan(arguments: Sequence[str], cwd: Path, environ: dict[str, str]) -> Invocation:
    """What to run for ``arguments`` typed in ``cwd``: the project is the directory of the nearest pyproject.toml (else
    ``cwd``); the subject is ``--subject``, else the environment's, else the pyproject's declaration, else the
    gate's reference subject, said in a note."""
    from harness.formats.environment import (
        ENVDIR_ENV_VAR,
        LAUNCHER_ENV_VAR,
        REPORTS_ENV_VAR,
        SUBJECT_ENV_VAR,
    )

    subject, nox_arguments = split_subject(arguments)
    pyproject = find_pyproject(cwd)
    project = pyproject.parent if pyproject else cwd
    notes = []
    environment = {
        LAUNCHER_ENV_VAR: COMMAND,
        REPORTS_ENV_VAR: environ.get(REPORTS_ENV_VAR) or str(project / "reports"),
        ENVDIR_ENV_VAR: environ.get(ENVDIR_ENV_VAR) or str(project / ".nox"),
    }
    if subject is not None:
        environment[SUBJECT_ENV_VAR] = _subject_path(subject, cwd)
    elif environ.get(SUBJECT_ENV_VAR):
        environment[SUBJECT_ENV_VAR] = _subject_path(environ[SUBJECT_ENV_VAR], cwd)
    elif pyproject is not None and declares_subject(pyproject):
        environment[SUBJECT_ENV_VAR] = str(pyproject)
    else:
        where = (
            f"{pyproject} has no [tool.{DECLARATION_TABLE}]" if pyproject else f"no pyproject.toml at or above {cwd}"
        )
        notes.append(f"{COMMAND}: {where} and no --subject was given: checking the gate's reference subject")
    return Invocation(["-f", str(GATE_ROOT / "noxfile.py"), *nox_arguments], environment, notes)


def version() -> str:
    """The installed gate's version (a checkout that was never installed says so)."""
    try:
        return metadata.version(COMMAND)
    except metadata.PackageNotFoundError:
        return f"(not installed: running from {GATE_ROOT})"


def main(argv: Sequence[str] | None = None) -> int:
    """Run nox on the gate's noxfile for the framework in the working directory; nox's exit status is the command's."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    head = arguments[: arguments.index("--")] if "--" in arguments else arguments
    if "-h" in head or "--help" in head:
        print(USAGE)
        return 0
    if "--version" in head:
        print(f"{COMMAND} {version()}")
        return 0
    sys.path.insert(0, str(GATE_ROOT))
    try:
        invocation = plan(arguments, Path.cwd(), dict(os.environ))
    except UsageError as err:
        print(f"{COMMAND}: {err}", file=sys.stderr)
        return 2
    for note in invocation.notes:
        print(note, file=sys.stderr)
    command = [sys.executable, "-m", "nox", *invocation.nox_arguments]
    return subprocess.run(command, env={**os.environ, **invocation.environment}).returncode


if __name__ == "__main__":
    raise SystemExit(main())
