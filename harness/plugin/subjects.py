"""Selecting and loading the subject: the downstream adapter code the gate checks.

The subject is named by a dotted module name or a path to a ``.py`` file (or package directory), through the
``--subject`` pytest option or the :data:`SUBJECT_ENV_VAR` variable; the default is the built-in reference subject.
"""

from __future__ import annotations

import importlib
import importlib.util
import itertools
import os
import sys
from pathlib import Path
from types import ModuleType

SUBJECT_ENV_VAR = "MEGATRON_CONFORMANCE_SUBJECT"
REFERENCE_SUBJECT = "harness.reference"
_PROTOCOL = (
    "split_into_chunks",
    "allreduce_non_tensor_model_parallel_grads",
    "install",
    "uninstall",
    "wrap_model_provider",
    "ADAPTER_PACKAGE",
)

_counter = itertools.count()


class SubjectError(RuntimeError):
    """The subject cannot be loaded, or lacks a name of the protocol."""


def subject_spec(option: str | None = None) -> str:
    """The subject named by the option, else the environment, else the reference subject."""
    return option or os.environ.get(SUBJECT_ENV_VAR) or REFERENCE_SUBJECT


def load_subject(spec: str) -> ModuleType:
    """Import the subject named by ``spec`` (dotted name, ``.py`` file or package directory)."""
    path = Path(spec)
    if spec.endswith(".py") or path.is_dir():
        return _load_from_path(path.resolve())
    try:
        return importlib.import_module(spec)
    except ImportError as err:
        raise SubjectError(f"cannot import subject module {spec!r}: {err}") from err


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


def _protocol_symbol(subject: ModuleType, name: str) -> object:
    """The subject's ``name``, or a :class:`SubjectError` saying the protocol requires it."""
    try:
        return getattr(subject, name)
    except AttributeError:
        raise SubjectError(
            f"subject {subject.__name__!r} lacks {name!r}, required by the subject protocol ({', '.join(_PROTOCOL)})"
        ) from None
