"""What is actually installed in the running interpreter, compared with what the target pins.

A target whose venv silently holds another Megatron or torch than the matrix says would make every green cell a lie,
so the gate reads the installed distributions and reports each difference in words.
"""

from __future__ import annotations

import importlib.metadata
import json
import platform
import re
from pathlib import Path
from urllib.parse import unquote, urlparse

from packaging.version import Version

from harness.targets.matrix import MEGATRON_DISTRIBUTION, Target

_PINNED_DISTRIBUTIONS = (MEGATRON_DISTRIBUTION, "torch", "numpy")


def installed_versions() -> dict[str, str | None]:
    """Versions of the pinned distributions and of Python in this interpreter (``None`` when absent); torch's with
    its build label (``2.13.0+cpu``, ``2.13.0+cu130``)."""
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for dist in _PINNED_DISTRIBUTIONS:
        try:
            versions[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            versions[dist] = None
    if versions["torch"] is not None:
        versions["torch"] = _torch_build_version() or versions["torch"]
    return versions


def _torch_build_version() -> str | None:
    """torch's own ``__version__`` (build label included), read from ``torch/version.py`` without importing torch.

    The package index's Linux wheel for some Pythons is a CUDA build whose distribution metadata says ``2.13.0``
    while torch calls itself ``2.13.0+cu130``; the local CPU wheel says ``+cpu`` in both. The pin matches either, so
    which build a target really ran on is recorded rather than assumed.
    """
    try:
        # Located beside the distribution's metadata rather than looked up in its RECORD: torch lists some twelve
        # thousand files there, and every session asks.
        version_file = Path(importlib.metadata.distribution("torch").locate_file("torch/version.py"))
        text = version_file.read_text()
    except (importlib.metadata.PackageNotFoundError, OSError):
        return None
    found = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", text, re.MULTILINE)
    return found.group(1) if found else None


def megatron_origin() -> str | None:
    """Where pip recorded the installed megatron-core came from (a file path or URL); ``None`` for an index."""
    try:
        raw = importlib.metadata.distribution(MEGATRON_DISTRIBUTION).read_text("direct_url.json")
    except importlib.metadata.PackageNotFoundError:
        return None
    if not raw:
        return None
    record = json.loads(raw)
    url = record["url"]
    if "vcs_info" in record:
        return f"git+{url}"
    parsed = urlparse(url)
    return unquote(parsed.path) if parsed.scheme == "file" else url


def pin_mismatches(target: Target, versions: dict[str, str | None], origin: str | None) -> list[str]:
    """Every way the installed versions differ from ``target``'s pins; empty when they all hold."""
    problems: list[str] = []

    def check(dist: str, spec: object) -> None:
        found = versions.get(dist)
        if found is None:
            problems.append(f"{dist} is not installed (pin {spec})")
        elif not spec.contains(Version(found), prereleases=True):  # type: ignore[attr-defined]
            problems.append(f"{dist} {found} is installed, the pin is {spec}")

    if target.megatron.version is not None:
        check(MEGATRON_DISTRIBUTION, target.megatron.version)
    elif versions.get(MEGATRON_DISTRIBUTION) is None:
        problems.append(f"{MEGATRON_DISTRIBUTION} is not installed")
    check("torch", target.torch)
    if target.numpy is not None:
        check("numpy", target.numpy)
    if versions["python"].rsplit(".", 1)[0] != target.python:
        problems.append(f"python {versions['python']} runs, the target asks for {target.python}")
    expected_origin = _expected_origin(target)
    if expected_origin != origin:
        problems.append(
            f"{MEGATRON_DISTRIBUTION} was installed from {origin or 'a package index'}, "
            f"the target names {expected_origin or 'a package index'}"
        )
    return problems


def _expected_origin(target: Target) -> str | None:
    source = target.megatron
    if source.kind == "pypi":
        return None
    if source.kind == "git":
        url = source.location.split("#", 1)[0]
        scheme, _, rest = url.partition("://")
        return f"{scheme}://{rest.split('@', 1)[0]}" if "@" in rest.split("/", 1)[-1] else url
    return str(Path(source.location))
