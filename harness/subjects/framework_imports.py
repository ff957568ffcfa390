"""Importing a framework's modules and names as its declaration gives them, with Megatron put back afterwards.

Every problem is reported against the declaration key that named the module: a module the framework does not have, a
dependency the venv lacks (with the key that installs it), or what the import raised.
"""

from __future__ import annotations

import importlib
import sys
from contextlib import AbstractContextManager
from types import ModuleType
from typing import Any

from harness.formats.megatron_symbols import parse_declaration
from harness.subjects.declaration import Declaration
from harness.subjects.import_chain import import_failure
from harness.subjects.upstream_state import UpstreamState, upstream_restored
from harness.targets.megatron_names import FINALIZE_MODULE

MISSING = object()
"""A name an owner did not hold."""


def megatron_restored(declaration: Declaration | None = None) -> AbstractContextManager[UpstreamState]:
    """Megatron (and the torch modules frameworks patch beside it) put back as it was when the block started,
    whatever an import of the framework re-bound there (what :mod:`~harness.subjects.upstream_state` puts back).
    ``finalize_model_grads`` and the modules of the symbols ``declaration`` says the framework replaces are imported
    first, so that what the framework binds there is put back too (where Megatron is installed: a declaration's
    splitter and provider can be checked without it)."""
    return upstream_restored([FINALIZE_MODULE, *replaced_modules(declaration)])


def replaced_modules(declaration: Declaration | None) -> list[str]:
    """The Megatron modules holding a symbol ``[megatron_symbols]`` declares replaced, in the order declared."""
    if declaration is None or not declaration.megatron_symbols:
        return []
    entries = parse_declaration(dict(declaration.megatron_symbols))
    replaced = (member for entry in entries if entry.usage == "replaces" for member in entry.members)
    return list(dict.fromkeys(member.partition(":")[0] for member in replaced))


def resolve_declared(declaration: Declaration, key: str, dotted: str) -> Any:
    """``module:qualname`` imported and looked up; a problem is reported against ``key``."""
    module_name, _, qualname = dotted.partition(":")
    value: Any = import_declared(declaration, key, module_name)
    for part in qualname.split("."):
        if not hasattr(value, part):
            raise declaration.fail(key, f"{module_name!r} has no attribute {qualname!r} (no {part!r})")
        value = getattr(value, part)
    if not callable(value):
        raise declaration.fail(key, f"{dotted} is {type(value).__name__}, not callable")
    return value


def import_declared(declaration: Declaration, key: str, module_name: str, fresh: bool = False) -> ModuleType:
    if fresh:
        sys.modules.pop(module_name, None)
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        if err.name and (module_name == err.name or module_name.startswith(f"{err.name}.")):
            where = declaration.distribution or f"source root {declaration.source_root}"
            raise declaration.fail(key, f"no module {err.name!r} ({where})") from None
        if err.name:
            raise declaration.fail(key, missing_dependency(module_name, err.name)) from None
        raise declaration.fail(key, import_failure(module_name, err)) from None
    except Exception as err:
        raise declaration.fail(key, import_failure(module_name, err)) from None


def missing_dependency(importing: str, missing: str) -> str:
    """One line for a module the framework's code imports that the venv lacks, naming the key that installs it."""
    return (
        f"importing {importing!r} needs module {missing!r}, which this target's venv does not have: add what "
        'installs it to [subject] requirements ("." installs the framework as pip install . does, with its '
        "dependencies)"
    )
