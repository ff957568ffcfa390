"""Installing a target's pins into its nox venv, with pip or with uv.

pip honours this machine's pip configuration (find-links to the local CPU torch wheel, the torch constraint). uv
ignores pip's configuration, so when uv is the backend the same find-links, constraints and indexes are handed to it
explicitly, bytecode is compiled (uv skips it and imports of torch/Megatron then cost twice as long), and the CPU
torch build is preferred; otherwise uv would resolve torch to the multi-GB CUDA build.

The local wheel must fit the *venv's* Python, not the one nox runs on: for a Python with no local torch wheel (cp312
here) the index's build is taken, and uv's cache (hard-linked into each venv) keeps one copy of it on disk however
many targets use it.
"""

from __future__ import annotations

import configparser
import os
import shlex
from pathlib import Path

PIP_CONFIG_FILES = (
    Path("/etc/pip.conf"),
    Path("/etc/xdg/pip/pip.conf"),
    Path.home() / ".pip" / "pip.conf",
    Path.home() / ".config" / "pip" / "pip.conf",
)
_PASSED_TO_UV = {
    "find-links": "--find-links",
    "constraint": "--constraint",
    "extra-index-url": "--extra-index-url",
    "index-url": "--index-url",
}
HARNESS_REQUIREMENTS = ("pytest", "pytest-xdist", "hypothesis", "pyyaml", "packaging")


def pip_settings(environ: dict[str, str] | None = None) -> dict[str, list[str]]:
    """The pip settings uv must be told about, read the way pip reads them (files, then ``PIP_*`` variables)."""
    environ = dict(os.environ if environ is None else environ)
    parser = configparser.ConfigParser()
    files = [*PIP_CONFIG_FILES]
    if environ.get("PIP_CONFIG_FILE"):
        files.append(Path(environ["PIP_CONFIG_FILE"]))
    parser.read([str(f) for f in files if f.is_file()])
    settings: dict[str, list[str]] = {}
    for key in _PASSED_TO_UV:
        value = environ.get(f"PIP_{key.upper().replace('-', '_')}")
        if value is None and parser.has_option("global", key):
            value = parser.get("global", key)
        if value:
            settings[key] = value.split()
    return settings


def _uv_options(settings: dict[str, list[str]]) -> list[str]:
    """uv command-line options equivalent to ``settings``, plus bytecode compilation."""
    return ["--compile-bytecode", *index_options(settings)]


def index_options(settings: dict[str, list[str]]) -> list[str]:
    """The uv options that make it look where pip looks: ``settings``' indexes, find-links and constraints."""
    options: list[str] = []
    for key, flag in _PASSED_TO_UV.items():
        for value in settings.get(key, []):
            options += [flag, value]
    if settings.get("find-links") or settings.get("extra-index-url"):
        options += ["--index-strategy", "unsafe-best-match"]
    return options


def local_wheel(requirement: str, find_links: list[str], python_version: str | None = None) -> Path | None:
    """A wheel file in a local find-links directory that satisfies ``requirement`` (a ``name<spec>`` string).

    uv ranks an index's release and a local wheel of the same version by its own rules; naming the file the pip
    configuration points at (the CPU torch build on this kind of machine) leaves it nothing to choose. The wheel must
    install on ``python_version`` (``"3.12"``; default: the running interpreter's).
    """
    from packaging.requirements import Requirement
    from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

    try:
        req = Requirement(requirement)
    except ValueError:
        return None
    candidates = []
    for link in find_links:
        directory = Path(link.removeprefix("file://"))
        if not directory.is_dir():
            continue
        for wheel in directory.glob("*.whl"):
            try:
                name, version, _, tags = parse_wheel_filename(wheel.name)
            except InvalidWheelFilename:
                continue
            if canonicalize_name(name) == canonicalize_name(req.name) and req.specifier.contains(version):
                if any(tag in _supported_tags(python_version) for tag in tags):
                    candidates.append((version, wheel))
    return max(candidates)[1] if candidates else None


def _supported_tags(python_version: str | None) -> set[object]:
    from packaging.tags import compatible_tags, cpython_tags, sys_tags

    if python_version is None:
        return set(sys_tags())
    version = tuple(int(part) for part in python_version.split("."))
    return {*cpython_tags(python_version=version), *compatible_tags(python_version=version)}


def install_command(requirements: list[str], backend: str, python_version: str | None = None) -> list[str]:
    """The ``session.install`` arguments for ``requirements`` under ``backend`` ('venv', 'virtualenv' or 'uv'), into
    a venv of ``python_version`` (default: the running interpreter's)."""
    if backend == "uv":
        settings = pip_settings()
        links = settings.get("find-links", [])
        pinned = [str(local_wheel(r, links, python_version) or r) if r.startswith("torch") else r for r in requirements]
        return [*_uv_options(settings), *pinned]
    return list(requirements)


def describe(requirements: list[str], backend: str, python_version: str | None = None) -> str:
    """A one-line shell rendering of the install, for error messages."""
    tool = "uv pip install" if backend == "uv" else "pip install"
    return f"{tool} {shlex.join(install_command(requirements, backend, python_version))}"
