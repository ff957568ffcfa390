"""Fake package indexes as folders of files: for the bisect's tests, megatron-core builds (a wheel whose
``megatron/core`` holds a function and its caller, and a source distribution whose build fails on its own: its build
backend lives inside it, so building it needs nothing from an index); for the install's tests, stand-ins of any
distribution (a ``transformer_engine`` that raises at import, a package whose newest release needs a newer torch)."""

from __future__ import annotations

import base64
import hashlib
import io
import tarfile
import zipfile
from pathlib import Path

OLD = "def scale(x, factor):\n    return x * factor\n"
NEW = "def scale(x, factor, bias=0):\n    return x * factor + bias\n"
CALLER_OLD = "from megatron.core.widget import scale\n\n\ndef step(x):\n    return scale(x, 2)\n"
CALLER_NEW = "from megatron.core.widget import scale\n\n\ndef step(x):\n    return scale(x, 2, bias=1)\n"


def wheel(folder: Path, version: str, files: dict[str, str]) -> Path:
    return distribution_wheel(folder, "megatron-core", version, files)


def distribution_wheel(
    folder: Path, name: str, version: str, files: dict[str, str], requires: tuple[str, ...] = ()
) -> Path:
    """A pure-Python wheel of ``name`` ``version`` holding ``files`` and requiring ``requires``."""
    stem = name.replace("-", "_")
    dist_info = f"{stem}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    metadata += "".join(f"Requires-Dist: {requirement}\n" for requirement in requires)
    contents = {
        **files,
        f"{dist_info}/METADATA": metadata,
        f"{dist_info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for path, text in contents.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    contents[f"{dist_info}/RECORD"] = "\n".join([*record, f"{dist_info}/RECORD,,"]) + "\n"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{stem}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for member, text in contents.items():
            archive.writestr(member, text)
    return path


_IN_TREE_BACKEND = '[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["."]\n'
"""A build backend inside the source distribution, so that building it needs nothing from an index."""


def broken_sdist(folder: Path, version: str) -> Path:
    path = folder / f"megatron_core-{version}.tar.gz"
    with tarfile.open(path, "w:gz") as archive:
        for name, text in {
            "pyproject.toml": _IN_TREE_BACKEND,
            "backend.py": "raise SystemExit('this build needs a compiler it cannot find')\n",
            "PKG-INFO": f"Metadata-Version: 2.1\nName: megatron-core\nVersion: {version}\n",
        }.items():
            data = text.encode()
            info = tarfile.TarInfo(f"megatron_core-{version}/{name}")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return path


def installed_distribution(
    site: Path, name: str, version: str, files: tuple[str, ...] = (), requires: tuple[str, ...] = ()
) -> Path:
    """The ``.dist-info`` an install leaves in ``site`` (a ``site-packages``): metadata with ``requires``, and a
    ``RECORD`` listing ``files``."""
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    (info / "METADATA").write_text(metadata + "".join(f"Requires-Dist: {r}\n" for r in requires))
    (info / "RECORD").write_text("".join(f"{f},,\n" for f in files))
    return info
