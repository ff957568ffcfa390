"""Naming the subject once, and loading it in any process that needs it.

The subject is named by a dotted module name, a path to a ``.py`` file (or package directory) exposing the subject
protocol, or a path to a declaration (a ``.toml`` file, or a ``pyproject.toml`` with ``[tool.megatron-conformance]``:
:mod:`harness.subjects.declaration`), through the ``--subject`` pytest option or the ``MEGATRON_CONFORMANCE_SUBJECT``
variable; the default is the built-in reference subject. :func:`resolve_subject` turns that name into a
:class:`SubjectRef` once per session: the path made absolute and a declaration read and checked. The reference is
small and picklable, so rank processes receive it and load the subject from it without reading the declaration again.
"""

from __future__ import annotations

import importlib
import importlib.util
import itertools
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from harness.formats.environment import REFERENCE_SUBJECT, SUBJECT_ENV_VAR
from harness.subjects.declaration import Declaration, is_declaration, read_declaration_file
from harness.subjects.declared import build_declared_subject

_counter = itertools.count()


class SubjectError(RuntimeError):
    """The subject cannot be loaded."""


@dataclass(frozen=True)
class SubjectRef:
    """The subject as the session names it. ``spec`` is what the user wrote (summary.json and repro lines carry it);
    ``name`` is what loads it from any working directory (a path made absolute); ``declaration`` the checked
    declaration of a declared subject."""

    spec: str
    name: str
    declaration: Declaration | None = None

    @property
    def kind(self) -> str:
        """``declaration`` or ``module``."""
        return "declaration" if self.declaration is not None else "module"

    def load(self) -> ModuleType:
        """Import the subject: a declared subject built from the declaration already read, a module imported, a
        ``.py`` file or package directory executed under a unique name (each call loads it afresh)."""
        if self.declaration is not None:
            return build_declared_subject(self.declaration)
        path = Path(self.name)
        if self.name.endswith(".py") or path.is_dir():
            return _load_from_path(path.resolve())
        try:
            return importlib.import_module(self.name)
        except ImportError as err:
            raise SubjectError(f"cannot import subject module {self.name!r}: {err}") from err


def subject_specs(value: str | None = None) -> list[str]:
    """The subjects ``value`` (default: the environment's variable) names, comma-separated: a target session checks
    several in turn, each in a session of its own (:mod:`harness.plugin.warm_sessions`)."""
    raw = os.environ.get(SUBJECT_ENV_VAR, "") if value is None else value
    return [part.strip() for part in raw.split(",") if part.strip()]


def subject_spec(option: str | None = None) -> str:
    """The subject named by the option, else the environment, else the reference subject. One session checks one
    subject: an environment naming several is an error here (the target session splits them)."""
    if option:
        return option
    named = subject_specs()
    if len(named) > 1:
        raise SubjectError(
            f"{SUBJECT_ENV_VAR} names {len(named)} subjects ({', '.join(named)}); a session checks one: run them "
            "through a target session (nox -s megatron-0.15), which checks each in a session of its own"
        )
    return named[0] if named else REFERENCE_SUBJECT


def resolve_subject(option: str | None = None) -> SubjectRef:
    """The subject named by ``option`` (else the environment, else the reference), resolved once. A declaration that
    cannot be used raises :class:`~harness.subjects.declaration.DeclarationFileError`, one line naming the file, the
    key and the reason."""
    spec = subject_spec(option)
    name = str(Path(spec).resolve()) if Path(spec).exists() else spec
    declaration = read_declaration_file(spec) if is_declaration(spec) else None
    return SubjectRef(spec, name, declaration)


def load_subject(spec: str) -> ModuleType:
    """Resolve and load the subject named by ``spec`` in one step (tools outside a session)."""
    return resolve_subject(spec).load()


def _load_from_path(path: Path) -> ModuleType:
    init = path / "__init__.py" if path.is_dir() else path
    if not init.is_file():
        raise SubjectError(f"subject file {init} does not exist")
    name = f"_megatron_conformance_subject_{next(_counter)}_{init.parent.name if path.is_dir() else path.stem}"
    locations = [str(path)] if path.is_dir() else None
    spec = importlib.util.spec_from_file_location(name, init, submodule_search_locations=locations)
    if spec is None or spec.loader is None:
        raise SubjectError(f"cannot load subject from {init}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception:
        del sys.modules[name]
        raise
    return module
