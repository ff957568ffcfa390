"""Selecting and loading the subject: the downstream adapter code the gate checks.

The subject is named by a dotted module name, a path to a ``.py`` file (or package directory) exposing the subject
protocol, or a path to a declaration (a ``.toml`` file, or a ``pyproject.toml`` with ``[tool.megatron-conformance]``:
:mod:`harness.plugin.declaration`), through the ``--subject`` pytest option or the :data:`SUBJECT_ENV_VAR` variable;
the default is the built-in reference subject.
"""

from __future__ import annotations

import importlib
import importlib.util
import itertools
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from harness.plugin.declaration import is_declaration, read_declaration_file
from harness.plugin.declared_subject import build_declared_subject

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


@dataclass(frozen=True)
class FreezeRuleNames:
    """Where a provider wrapper reads its freeze rules from ``args``, and how a pattern applies to a name."""

    freeze: str | None = "freeze_patterns"
    train_only: str | None = "train_only_patterns"
    match: str = "search"


def required_call_shapes(subject: ModuleType, shapes: Mapping[str, Sequence[str]]) -> dict[str, Sequence[str]]:
    """The call shapes (of a target's ``provider.calls``) the subject's models meet: those its declaration names in
    ``[provider] call_shapes`` (a decoder-only framework never meets 0.13's ``encoder_decoder``), else all of them.
    The others are still checked, as advisories."""
    declaration = getattr(subject, "DECLARATION", None)
    named = declaration.provider.get("call_shapes") if declaration is not None else None
    return {name: keywords for name, keywords in shapes.items() if named is None or name in named}


def freeze_rule_names(subject: ModuleType) -> FreezeRuleNames:
    """The declaration's names for "freeze these" and "train only these"; the protocol's own for a module subject."""
    declaration = getattr(subject, "DECLARATION", None)
    if declaration is None:
        return FreezeRuleNames()
    provider = declaration.provider
    return FreezeRuleNames(provider.get("freeze"), provider.get("train_only"), provider.get("match", "search"))


@dataclass(frozen=True)
class ProviderPromises:
    """What a subject's provider wrapper promises beyond the calls Megatron makes: to forward keywords into an inner
    provider that takes ``**kwargs`` (``inner_takes_kwargs``), and to keep the freeze rules of wrappers applied one
    over another (``nested``). Where a promise is not made, the cases that check it are advisories."""

    inner_takes_kwargs: bool = True
    nested: bool = True


def provider_promises(subject: ModuleType) -> ProviderPromises:
    """The subject's ``PROVIDER_INNER_TAKES_KWARGS`` and ``PROVIDER_NESTED`` (a declared subject's ``[provider]``
    ``inner_takes_kwargs`` and ``nested``, false unless declared); a module subject that sets neither promises both,
    as a module subject is strict."""
    return ProviderPromises(
        bool(getattr(subject, "PROVIDER_INNER_TAKES_KWARGS", True)), bool(getattr(subject, "PROVIDER_NESTED", True))
    )


def budget_env_var(subject: ModuleType) -> str | None:
    """The environment variable the subject reads its budget from (``BUDGET_ENV_VAR``; a declaration's
    ``budget.env``): it may be read at import, and such a read is listed as a waiver, never reported."""
    name = getattr(subject, "BUDGET_ENV_VAR", None)
    return name if isinstance(name, str) and name else None


def subject_spec(option: str | None = None) -> str:
    """The subject named by the option, else the environment, else the reference subject."""
    return option or os.environ.get(SUBJECT_ENV_VAR) or REFERENCE_SUBJECT


def load_subject(spec: str) -> ModuleType:
    """Import the subject named by ``spec`` (dotted name, ``.py`` file, package directory or declaration file).

    A declaration that cannot be used raises :class:`~harness.plugin.declaration.DeclarationFileError`, one line
    naming the file, the key and the reason.
    """
    if is_declaration(spec):
        return build_declared_subject(read_declaration_file(spec))
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
