"""Finding an installed interpreter of the Python version a target asks for.

Megatron releases from 0.17 on need Python 3.12 while the gate itself may run on 3.11. A user's 3.12 is often not
on PATH under its own name: pyenv keeps every version under ``$PYENV_ROOT/versions`` and its ``python3.12`` shim
answers "command not found" unless that version is selected; asdf, mise and uv keep theirs in directories of their
own. Neither nox nor uv looks past a failing shim, so the gate looks in each of those places itself and runs every
candidate to ask its version. What it finds is linked as ``python3.12`` into a directory of the gate's own, put first
on the nox process's PATH: nox then finds it by version, and sessions keep ``3.12`` (not a machine's path) as their
Python in ``nox -l --json``, which the CI workflow reads. Nothing is downloaded: a missing interpreter is one line
saying which target needs which version and how to get it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from harness.targets.uv_lookup import find_uv

_VERSION_PROBE = "import sys; print('%d.%d' % sys.version_info[:2])"
_PROBE_TIMEOUT_S = 15


def running_version() -> str:
    """The ``X.Y`` of the interpreter running the gate."""
    return f"{sys.version_info[0]}.{sys.version_info[1]}"


def _interpreter_version(executable: Path) -> str | None:
    """The ``X.Y`` an interpreter reports when run, or ``None`` when it does not run (a shim of an unselected
    version, a broken link)."""
    try:
        completed = subprocess.run(
            [str(executable), "-c", _VERSION_PROBE],
            capture_output=True,
            text=True,
            timeout=_PROBE_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return completed.stdout.strip() if completed.returncode == 0 else None


def _version_dirs(root: Path, version: str) -> list[Path]:
    """Installation directories of ``version`` (``3.12``, ``3.12.1``, ...) under a version manager's root, newest
    patch release first; other builds (``3.12-dev``, ``3.12.1t``) are left out."""
    if not root.is_dir():
        return []
    pattern = re.compile(rf"^{re.escape(version)}(?:\.(\d+))?$")
    found = [(m, d) for d in root.iterdir() if (m := pattern.match(d.name))]
    return [d for m, d in sorted(found, key=lambda pair: int(pair[0].group(1) or -1), reverse=True)]


def _pyenv_root(environ: dict[str, str]) -> Path:
    if environ.get("PYENV_ROOT"):
        return Path(environ["PYENV_ROOT"])
    return Path(environ.get("HOME", str(Path.home()))) / ".pyenv"


def _uv_managed(version: str, environ: dict[str, str]) -> Iterator[Path]:
    """uv's own discovery, restricted to the interpreters uv installed itself (never a download)."""
    uv = find_uv(environ.get("PATH"))
    if uv is None:
        return
    try:
        completed = subprocess.run(
            [uv, "python", "find", "--managed-python", "--no-python-downloads", version],
            capture_output=True,
            text=True,
            timeout=_PROBE_TIMEOUT_S,
            check=False,
            env=environ,
        )
    except (OSError, subprocess.TimeoutExpired):
        return
    if completed.returncode == 0 and completed.stdout.strip():
        yield Path(completed.stdout.strip())


def candidates(version: str, environ: dict[str, str] | None = None) -> Iterator[Path]:
    """Where an interpreter of ``version`` may be, in the order a user's shell would prefer it.

    PATH first (what the user selected), then pyenv, asdf and mise installations, then uv-managed interpreters.
    """
    environ = dict(os.environ if environ is None else environ)
    on_path = shutil.which(f"python{version}", path=environ.get("PATH"))
    if on_path:
        yield Path(on_path)
    home = Path(environ.get("HOME", str(Path.home())))
    managers = (
        _pyenv_root(environ) / "versions",
        Path(environ.get("ASDF_DATA_DIR", home / ".asdf")) / "installs" / "python",
        Path(environ.get("MISE_DATA_DIR", home / ".local" / "share" / "mise")) / "installs" / "python",
    )
    for root in managers:
        for directory in _version_dirs(root, version):
            yield directory / "bin" / f"python{version}"
    yield from _uv_managed(version, environ)


def find_interpreter(version: str, environ: dict[str, str] | None = None) -> Path | None:
    """An interpreter that runs and reports ``version``; ``None`` when this machine has none."""
    for candidate in candidates(version, environ):
        if _interpreter_version(candidate) == version:
            return candidate
    return None


def expose_on_path(version: str, directory: Path, environ: dict[str, str] | None = None) -> bool:
    """Make ``python<version>`` on ``environ``'s PATH (default: this process's) an interpreter of that version, if
    this machine has one; ``False`` if not.

    Nothing is done when the name on PATH already runs the right version (a selected pyenv version, setup-python).
    """
    environ = os.environ if environ is None else environ
    name = f"python{version}"
    on_path = shutil.which(name, path=environ.get("PATH"))
    if on_path and _interpreter_version(Path(on_path)) == version:
        return True
    found = find_interpreter(version, dict(environ))
    if found is None:
        return False
    directory.mkdir(parents=True, exist_ok=True)
    # Made under a name of its own, then renamed over the link: target sessions run side by side each expose the
    # version, and none may find the name missing while another replaces it.
    link = directory / name
    fresh = directory / f".{name}.{os.getpid()}"
    if fresh.is_symlink() or fresh.exists():
        fresh.unlink()
    fresh.symlink_to(found)
    os.replace(fresh, link)
    if environ.get("PATH", "").split(os.pathsep)[0] != str(directory):
        environ["PATH"] = os.pathsep.join([str(directory), environ.get("PATH", "")])
    return True


def missing_message(session: str, version: str) -> str:
    """The one line a user reads when a target's Python is not installed."""
    return (
        f"target {session} needs Python {version}, and none was found on PATH (python{version}), under pyenv, asdf "
        f"or mise, or among uv's interpreters: install one, e.g. `pyenv install {version}` or "
        f"`uv python install {version}`, then run the session again"
    )
