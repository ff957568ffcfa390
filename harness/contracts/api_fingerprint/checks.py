"""The api-fingerprint contract's checks of a declaration and the subject's calls against a target's fingerprints."""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Iterable
from types import ModuleType
from typing import Any

from harness.source.source_scan import CallSite
from harness.source.symbol_table import Declared

_POSITIONAL = ("POSITIONAL_ONLY", "POSITIONAL_OR_KEYWORD")


TRANSFORMER_ENGINE_MODULES = ("megatron.core.extensions.transformer_engine",)
"""Megatron modules whose classes are complete only where Transformer Engine is installed (without it they are
stand-ins): what they lack on a CPU machine says nothing about the release."""


def machine_bound(symbol: str) -> bool:
    """Whether ``symbol`` lives where Megatron defines it fully only with Transformer Engine."""
    module = symbol.partition(":")[0]
    return any(module == name or module.startswith(f"{name}.") for name in TRANSFORMER_ENGINE_MODULES)


def missing_symbols(declaration: Iterable[Declared], fingerprints: dict[str, dict[str, Any]]) -> list[str]:
    """One line per non-optional entry none of whose members exists (those only Transformer Engine completes left
    out: :func:`machine_bound`)."""
    problems = []
    for entry in declaration:
        if entry.optional or any(fingerprints[m]["exists"] for m in entry.members):
            continue
        if all(machine_bound(m) for m in entry.members):
            continue
        reasons = "; ".join(f"{m}: {fingerprints[m]['missing']}" for m in entry.members)
        what = entry.members[0] if len(entry.members) == 1 else f"none of the alternatives {entry.key}"
        problems.append(f"{what} ({entry.usage}) does not exist: {reasons}")
    return problems


def replacement_of(subject: ModuleType, name: str) -> tuple[Any, str | None]:
    """The replacement an entry names, and ``None``; or ``None`` and why it cannot be had. ``name`` is an attribute
    of the subject (the gate's protocol name), or the framework's own function as ``module:qualname``."""
    if ":" not in name:
        if not hasattr(subject, name):
            return None, f"the subject has no {name!r}, which it declares as the replacement"
        return getattr(subject, name), None
    module_name, _, qualname = name.partition(":")
    try:
        value: Any = importlib.import_module(module_name)
    except Exception as err:
        return None, f"the declared replacement {name} cannot be imported: {type(err).__name__}: {err}"
    for part in qualname.split("."):
        if not hasattr(value, part):
            return None, f"the declared replacement {name} does not exist: {module_name!r} has no {qualname!r}"
        value = getattr(value, part)
    return value, None


def resolved_member(entry: Declared, fingerprints: dict[str, dict[str, Any]]) -> str | None:
    """The member of ``entry`` the subject uses on this target: the first one that exists."""
    return next((m for m in entry.members if fingerprints.get(m, {}).get("exists")), None)


def replacement_problems(upstream: list[dict[str, Any]], replacement: list[dict[str, Any]]) -> list[str]:
    """Ways a call that upstream's signature accepts would fail on the replacement.

    The replacement must take upstream's positional parameters under the same names in the same order (callers
    pass them either way), with a default wherever upstream has one (callers may omit them), upstream's
    keyword-only parameters by name, ``*args``/``**kwargs`` where upstream has them, and no required parameter of
    its own.
    """
    kinds = {p["kind"] for p in replacement}
    takes_args, takes_kwargs = "VAR_POSITIONAL" in kinds, "VAR_KEYWORD" in kinds
    rep_positional = [p for p in replacement if p["kind"] in _POSITIONAL]
    rep_named = {p["name"]: p for p in replacement if p["kind"] in ("POSITIONAL_OR_KEYWORD", "KEYWORD_ONLY")}
    up_positional = [p for p in upstream if p["kind"] in _POSITIONAL]
    problems: list[str] = []
    for index, up in enumerate(up_positional):
        where = f"upstream's parameter {index + 1} {up['name']!r}"
        rep = rep_positional[index] if index < len(rep_positional) else None
        if rep is None:
            if not takes_args:
                problems.append(f"{where} has no counterpart: the replacement takes {len(rep_positional)} positional")
            elif up["kind"] == "POSITIONAL_OR_KEYWORD" and up["name"] not in rep_named and not takes_kwargs:
                problems.append(f"{where} cannot be passed by keyword to the replacement")
            continue
        if up["kind"] == "POSITIONAL_OR_KEYWORD" and rep["name"] != up["name"]:
            problems.append(
                f"{where} is named {rep['name']!r} in the replacement (a caller passing {up['name']}= fails)"
            )
        elif up["kind"] == "POSITIONAL_OR_KEYWORD" and rep["kind"] == "POSITIONAL_ONLY":
            problems.append(f"{where} is positional-only in the replacement (a caller passing {up['name']}= fails)")
        if up["default"] is not None and rep["default"] is None:
            problems.append(f"{where} has a default ({up['default']}), the replacement requires it")
    for up in (p for p in upstream if p["kind"] == "KEYWORD_ONLY"):
        rep = rep_named.get(up["name"])
        if rep is None and not takes_kwargs:
            problems.append(f"upstream's keyword-only parameter {up['name']!r} is not accepted by the replacement")
        elif rep is not None and up["default"] is not None and rep["default"] is None:
            problems.append(f"upstream's {up['name']!r} has a default ({up['default']}), the replacement requires it")
    up_kinds = {p["kind"] for p in upstream}
    if "VAR_POSITIONAL" in up_kinds and not takes_args:
        problems.append("upstream takes *args, the replacement does not")
    if "VAR_KEYWORD" in up_kinds and not takes_kwargs:
        problems.append("upstream takes **kwargs, the replacement does not")
    upstream_names = {p["name"] for p in upstream}
    extra_positional = [p for p in rep_positional[len(up_positional) :] if p["name"] not in upstream_names]
    extra_keyword = [p for p in replacement if p["kind"] == "KEYWORD_ONLY" and p["name"] not in upstream_names]
    for rep in extra_positional + extra_keyword:
        if rep["default"] is None:
            problems.append(f"the replacement requires {rep['name']!r}, which upstream's callers do not pass")
    return problems


def unbound_calls(params: list[dict[str, Any]], calls: Iterable[CallSite]) -> list[tuple[CallSite, str]]:
    """Each call shape with the reason it does not bind to ``params``; empty when at least one shape binds.

    A subject that supports several releases calls a function in several shapes and picks one at run time (for
    example ``_get_main_grad_attr(param, flag)`` or ``_get_main_grad_attr(param)``), so one binding shape suffices.
    """
    signature = inspect.Signature(
        [
            inspect.Parameter(
                str(p["name"]),
                getattr(inspect.Parameter, str(p["kind"])),
                default=inspect.Parameter.empty if p["default"] is None else p["default"],
            )
            for p in params
        ]
    )
    failures: list[tuple[CallSite, str]] = []
    for call in calls:
        try:
            signature.bind(*range(call.positional), **dict.fromkeys(call.keywords))
        except TypeError as err:
            failures.append((call, str(err)))
        else:
            return []
    return failures


def changed_copies(declared: dict[str, str], fingerprints: dict[str, dict[str, Any]]) -> list[str]:
    """One line per upstream function the subject copied (``UPSTREAM_BODY_HASHES``) whose installed body no longer
    hashes as declared, is missing, or cannot be hashed here; ``fingerprints`` holds each declared symbol's.

    The hash is the fingerprint's ``body_hash``, so the installed side is compared exactly as the api-diff compares
    two targets: decorators and body through the AST, without docstrings, comments or whitespace.
    """
    problems = []
    for symbol, copied in declared.items():
        found = fingerprints[symbol]
        if not found["exists"]:
            problems.append(f"upstream `{symbol}`, which the subject copied, does not exist here: {found['missing']}")
        elif found["kind"] != "function":
            problems.append(f"upstream `{symbol}` is a {found['kind']} here, not a function whose body was copied")
        elif found["body_hash"] is None:
            problems.append(
                f"upstream `{symbol}` has no source on this target to hash, so the subject's copy (body hash {copied}) "
                "cannot be checked"
            )
        elif found["body_hash"] != copied:
            problems.append(
                f"upstream `{symbol}` changed since the subject copied it: body hash {found['body_hash']} on this "
                f"target, the subject declares {copied}"
            )
    return problems
