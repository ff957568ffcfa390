"""What a declaration asks to have installed beside the target's Megatron (``[subject] distribution``,
``requirements``, ``leave_out``), gathered over the subjects of a session.

How it is installed, and what may and may not move, is :mod:`harness.install.framework_install`'s.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement

from harness.install.framework_install import FrameworkInstall
from harness.subjects.declaration import Declaration, is_local_requirement


def declared_install(declaration: Declaration) -> FrameworkInstall:
    """What ``declaration`` installs: its requirement strings and published framework, and its folders (a path,
    relative to the declaration's own folder, installed as ``pip install .`` does)."""
    requirements: list[str] = []
    folders: list[Path] = []
    frameworks: list[str] = [declaration.distribution] if declaration.distribution else []
    for item in declaration.requirements:
        if is_local_requirement(item):
            folder = (declaration.path.parent / item).resolve()
            if not any((folder / name).is_file() for name in ("pyproject.toml", "setup.py")):
                raise declaration.fail(
                    "subject.requirements", f"{item!r}: {folder} has no pyproject.toml or setup.py to install it from"
                )
            folders.append(folder)
            frameworks += [name for name in [project_name(folder)] if name]
            continue
        try:
            Requirement(item)
        except InvalidRequirement as err:
            raise declaration.fail("subject.requirements", f"{item!r} is not a requirement: {err}") from None
        requirements.append(item)
    if declaration.distribution:
        requirements.append(declaration.distribution)
    return FrameworkInstall(tuple(requirements), tuple(folders), declaration.leave_out, tuple(frameworks))


def merged(installs: Iterable[FrameworkInstall]) -> FrameworkInstall:
    """One install for several subjects of a session, in their order, each item once."""

    def once(values: Iterable) -> tuple:
        return tuple(dict.fromkeys(values))

    installs = list(installs)
    return FrameworkInstall(
        once(r for i in installs for r in i.requirements),
        once(f for i in installs for f in i.folders),
        once(n for i in installs for n in i.leave_out),
        once(n for i in installs for n in i.frameworks),
    )


def project_name(folder: Path) -> str | None:
    """The ``[project] name`` of the folder's ``pyproject.toml``, where it states one."""
    try:
        return tomllib.loads((folder / "pyproject.toml").read_text()).get("project", {}).get("name")
    except (OSError, tomllib.TOMLDecodeError):
        return None
