"""How a replacement fits Megatron's own calls of the symbol it replaces (:mod:`.call_sites`): whether each call
binds, how many values the replacement returns where a call unpacks its result, and which passed keywords it takes
in ``**kwargs`` and never reads.

The returned count is read from the replacement's source: decided where every ``return`` of the function itself
(not of functions nested in it) is a tuple of the same length, undecided otherwise, and an undecided count is never
taken for a fit.

A replacement is a live object (what a declared apply bound) or a :class:`ReadFunction`, its definition read from
the framework's source where it cannot be had here: the same rules judge both, from the same definition.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from dataclasses import dataclass
from typing import Any

from harness.source.call_sites import MegatronCall
from harness.source.source_scan import own_returns

KIND_WORDS = {
    "function": "module-level function",
    "method": "plain function (a method: the instance comes first)",
    "staticmethod": "static method",
    "classmethod": "class method",
    "property": "property",
    "value": "callable that is no function (no instance passed)",
}
"""What each descriptor kind is called in a message."""


@dataclass(frozen=True)
class ReadFunction:
    """A replacement known from its definition in source, never run: what its signature binds is read from the
    parameters as written (a default's value is never needed, only that there is one)."""

    node: ast.FunctionDef | ast.AsyncFunctionDef
    bound: bool = False
    """Bound to an instance before it is set (``self.method``): its first parameter is taken."""
    returns: int | None = None
    """How many values it returns on this target where its ``return``s differ and the framework's own flags decide
    which runs (set on the object by the patching function); None: read from the ``return``s alone."""

    def signature(self) -> inspect.Signature:
        arguments = self.node.args
        positional = [*arguments.posonlyargs, *arguments.args]
        defaults = [None] * (len(positional) - len(arguments.defaults)) + list(arguments.defaults)
        skip = 1 if self.bound and positional else 0
        parameters = [
            inspect.Parameter(
                a.arg,
                inspect.Parameter.POSITIONAL_ONLY
                if i < len(arguments.posonlyargs)
                else inspect.Parameter.POSITIONAL_OR_KEYWORD,
                default=inspect.Parameter.empty if d is None else ast.unparse(d),
            )
            for i, (a, d) in enumerate(zip(positional, defaults, strict=True))
            if i >= skip
        ]
        if arguments.vararg is not None:
            parameters.append(inspect.Parameter(arguments.vararg.arg, inspect.Parameter.VAR_POSITIONAL))
        parameters += [
            inspect.Parameter(
                a.arg, inspect.Parameter.KEYWORD_ONLY, default=inspect.Parameter.empty if d is None else ast.unparse(d)
            )
            for a, d in zip(arguments.kwonlyargs, arguments.kw_defaults, strict=True)
        ]
        if arguments.kwarg is not None:
            parameters.append(inspect.Parameter(arguments.kwarg.arg, inspect.Parameter.VAR_KEYWORD))
        return inspect.Signature(parameters)


def signature_of(replacement: Any) -> inspect.Signature:
    """The signature a call binds to: read from source, or inspected (``TypeError``/``ValueError`` where none)."""
    if isinstance(replacement, ReadFunction):
        return replacement.signature()
    return inspect.signature(callable_of(replacement))


def callable_of(replacement: Any) -> Any:
    """The function a replacement runs: a static or class method's, a property's getter, else itself."""
    if isinstance(replacement, property):
        return replacement.fget
    return replacement.__func__ if isinstance(replacement, staticmethod | classmethod) else replacement


def binding_problem(replacement: Any, call: MegatronCall, kind: str) -> str | None:
    """Why ``call`` would not bind to ``replacement``, bound as ``kind`` (:func:`.patch_effects.descriptor_kind`, or
    ``function`` for a module's); None when it binds. A plain method gets the instance first unless the call names
    the class; a class method gets the class. Where the call forwards ``*args`` or ``**kwargs``, only what it names
    is checked. A read (``self.name``) binds only to a property, a call never does."""
    if call.read and kind != "property":
        gets = "a bound method" if kind == "method" else "the callable itself"
        return f"it reads a property, and the patch binds a {KIND_WORDS[kind]} there: the read gets {gets}, not a value"
    if not call.read and kind == "property":
        return "it calls a method, and the patch binds a property there: the call calls the property's value"
    try:
        signature = signature_of(replacement)
    except (TypeError, ValueError):
        return "the replacement has no inspectable signature"
    implicit = kind in ("classmethod", "property") or (kind == "method" and not call.through_class)
    positional = [object()] * (call.positional + (1 if implicit else 0))
    keywords = dict.fromkeys(call.keywords)
    bind = signature.bind_partial if call.star_args or call.star_kwargs else signature.bind
    try:
        bind(*positional, **keywords)
    except TypeError as err:
        return str(err)
    return None


def _definition(function: Any) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    if isinstance(function, ReadFunction):
        return function.node
    try:
        source = textwrap.dedent(inspect.getsource(inspect.unwrap(callable_of(function))))
        tree = ast.parse(source)
    except (OSError, TypeError, SyntaxError):
        return None
    node = tree.body[0] if tree.body else None
    return node if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) else None


def returned_count(function: Any) -> int | None:
    """How many values ``function`` returns, where its source decides it; None where it does not."""
    if isinstance(function, ReadFunction) and function.returns is not None:
        return function.returns
    definition = _definition(function)
    if definition is None:
        return None
    counts = {tuple_length(node) for node in own_returns(definition)}
    return counts.pop() if len(counts) == 1 and None not in counts else None


def tuple_length(node: ast.Return) -> int | None:
    """How many values one ``return`` gives: a literal tuple's length; None for anything else (a call, a name, a
    starred element)."""
    value = node.value
    if not isinstance(value, ast.Tuple) or any(isinstance(e, ast.Starred) for e in value.elts):
        return None
    return len(value.elts)


def unread_var_keyword(function: Any) -> str | None:
    """The name of ``function``'s ``**kwargs`` parameter when its body never reads it; None otherwise."""
    definition = _definition(function)
    if definition is None or definition.args.kwarg is None:
        return None
    name = definition.args.kwarg.arg
    read = any(isinstance(node, ast.Name) and node.id == name for stmt in definition.body for node in ast.walk(stmt))
    return None if read else name


def dropped_keywords(function: Any, calls: list[MegatronCall]) -> dict[str, list[MegatronCall]]:
    """Keywords Megatron's calls pass that ``function`` takes only in a ``**kwargs`` it never reads, with the calls
    that pass each."""
    if unread_var_keyword(function) is None:
        return {}
    try:
        named = {
            p.name
            for p in signature_of(function).parameters.values()
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        }
    except (TypeError, ValueError):
        return {}
    dropped: dict[str, list[MegatronCall]] = {}
    for call in calls:
        for keyword in call.keywords:
            if keyword not in named:
                dropped.setdefault(keyword, []).append(call)
    return dropped
